"""The benchmarks' shared helpers: commands timed in turns with fresh folders, and the verdict from two timings."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import common  # noqa: E402
from playground.core.record import Stats  # noqa: E402

# Appends its name and the folder $COLD names (and whether that folder already existed) to a log, then
# prints a number, as a build script prints its own seconds.
SCRIPT = ("import os, sys; d = os.environ['COLD']; seen = os.path.exists(d); os.makedirs(d, exist_ok=True); "
          "open(sys.argv[1], 'a').write(f'{sys.argv[2]} {d} {seen}\\n'); print('took', sys.argv[3])")


def test_median_of_takes_turns_with_a_fresh_folder_per_run(tmp_path):
    log = tmp_path / "log"
    cmds = {name: [sys.executable, "-c", SCRIPT, str(log), name, secs] for name, secs in (("a", "1.5"), ("b", "2"))}
    runs = common.median_of(3, cmds, fresh=("COLD",))
    lines = [ln.split() for ln in log.read_text().splitlines()]
    assert [ln[0] for ln in lines] == ["a", "b"] * 3  # rounds, not one command three times over
    assert len({ln[1] for ln in lines}) == 6 and {ln[2] for ln in lines} == {"False"}  # a new, empty folder each run
    assert not any(Path(ln[1]).exists() for ln in lines)  # and removed afterwards
    assert runs["a"].printed == (1.5, 1.5, 1.5) and runs["b"].inner == 2.0
    assert len(runs["a"].walls) == 3 and 0 < runs["a"].wall < 30


def test_a_failing_command_ends_the_benchmark_with_its_error():
    with pytest.raises(SystemExit) as e:
        common.wall([sys.executable, "-c", "import sys; sys.exit('no compiler here')"])
    assert "failed (exit 1)" in str(e.value) and "no compiler here" in str(e.value)


def stats(q1, median, q3):
    return Stats(median_s=median, q1_s=q1, q3_s=q3, samples=30, method="perf_counter")


@pytest.mark.parametrize("mine, theirs, expected", [
    (stats(1.0, 1.1, 1.2), stats(1.3, 1.4, 1.5), "FASTER"),
    (stats(1.3, 1.4, 1.5), stats(1.0, 1.1, 1.2), "SLOWER"),
    (stats(1.0, 1.2, 1.35), stats(1.3, 1.4, 1.5), "TIE"),  # the ranges overlap: a tie, even 15% apart
    (stats(1.0, 1.5, 2.0), stats(1.4, 1.45, 1.5), "TIE"),
])
def test_verdict_is_a_tie_where_the_interquartile_ranges_overlap(mine, theirs, expected):
    assert common.verdict(mine, theirs) == expected


def _row(contender: str, ms: float) -> dict:
    return {"contender": contender, "variant": contender.split(" ")[0], "median_ms": ms, "q1_ms": ms, "q3_ms": ms,
            "samples": 30, "method": "CUDA events", "gflops": 137_438.95 / ms, "max_abs_err": 0.0, "tolerance": 1.0,
            "ok": True}


def test_the_ladder_row_is_the_median_run_and_its_verdict_needs_every_rung_to_climb():
    import linear_gpu

    runs = [[_row("F.linear (cuBLAS, TF32 off)", 2.70), _row("cuda-naive", 200.0 + d), _row("cuda-tiled", 2.8 + d)]
            for d in (0.3, -0.1, 0.1)]
    rows = linear_gpu.median_of_runs(runs)
    assert [r["median_ms"] for r in rows] == pytest.approx([2.70, 200.1, 2.9]) and rows[2]["runs_ms"] == [3.1, 2.7, 2.9]
    verdict = linear_gpu.summarise(rows)
    assert verdict["climbs"] and verdict["top"] == "cuda-tiled" and round(verdict["top_pct_of_F_linear"]) == 93
    assert verdict["met"] and rows[2]["worklog_pct"] == 78.4
    slower = linear_gpu.summarise([_row("F.linear (cuBLAS, TF32 off)", 2.7), _row("cuda-naive", 2.0), _row("cuda-tiled", 3.0)])
    assert not slower["climbs"] and not slower["met"]
    # TF32 rows are other arithmetic: the tensor-core rung is judged against F.linear with TF32, not in the climb
    tf32 = [{**_row(linear_gpu.TF32_BASE, 0.9), "variant": "", "math": "tf32"},
            {**_row("cuda-tensor-core", 1.8), "math": "tf32"}]
    verdict = linear_gpu.summarise([*rows[:1], tf32[0], *rows[1:], tf32[1]])
    assert verdict["top"] == "cuda-tiled" and verdict["climbs"] and not verdict["met"]  # cuda-pipeline unmeasured
    assert verdict["tensor_cores"] == [("cuda-tensor-core", pytest.approx(50.0), True)]
    # the mma.sync TF32 rung has a target of its own: 60% of F.linear with TF32
    for ms, met in ((1.8, False), (1.2, True)):
        pipeline = {**_row("cuda-pipeline", ms), "math": "tf32"}
        assert linear_gpu.summarise([*rows[:1], tf32[0], *rows[1:], tf32[1], pipeline])["met"] is met


def test_the_graph_probes_figures_are_medians_of_its_runs_and_its_floor_adds_the_null_cell():
    import lltm_graph_probe as probe

    runs = [{("eager", "forward"): {"wall": w}, ("null cell", "forward"): {"wall": 40.0 + d},
             ("eager", "backward"): {"wall": 900.0}, ("null cell", "backward"): {"wall": 200.0},
             ("cuda-graph", "forward"): {"wall": 280.0}, ("cuda-graph", "backward"): {"wall": 700.0},
             ("cuda-fast", "forward"): {"wall": 300.0}, ("cuda-fast", "backward"): {"wall": 750.0}}
            for w, d in ((420.0, 5), (400.0, 0), (410.0, 10))]
    times = probe.median_of_runs(runs)
    assert times[("eager", "forward")]["wall"] == 410.0 and times[("null cell", "forward")]["wall"] == 45.0
    works = {"cuda-graph": (240.0, 510.0), "cuda-fast": (200.0, 310.0), "null cell": (0.0, 10.0)}
    lines = probe.floor_lines((1024, 512, 1024), times, works)
    # the null cell's wall + the kernels beyond its own, against eager / 1.5 (273.3 forward, 600 backward)
    assert len(lines) == 4
    assert lines[0].endswith("| forward | 240.0 | 45.0 | 285.0 | 1.44 | 1.46 | 273.3 | NO |")
    assert lines[1].endswith("| backward | 500.0 | 200.0 | 700.0 | 1.29 | 1.29 | 600.0 | NO |")
    assert lines[2].endswith("| forward | 200.0 | 45.0 | 245.0 | 1.67 | 1.37 | 273.3 | fits |")
    assert lines[3].endswith("| backward | 300.0 | 200.0 | 500.0 | 1.80 | 1.20 | 600.0 | fits |")


@pytest.mark.cuda  # the GPU box's probe (lltm_graph_probe.py), checked there: a C++ build with autograd's headers
def test_the_null_cell_goes_through_cuda_fasts_autograd_and_gives_five_gradients_shaped_as_the_inputs():
    import torch

    import lltm_graph_probe as probe

    null = probe.null_cell()
    batch, features, state = 4, 3, 5
    shapes = ((batch, features), (3 * state, state + features), (3 * state,), (batch, state), (batch, state))
    leaves = [torch.randn(s, requires_grad=True) for s in shapes]
    new_h, new_cell = null(*leaves)
    assert new_h.shape == new_cell.shape == (batch, state) and "LLTMFunction" in new_h.grad_fn.name()
    (new_h.sum() + new_cell.sum()).backward()
    assert [x.grad.shape for x in leaves] == [x.shape for x in leaves]


def test_sum_gpu_says_where_fast_is_behind_torch_sum():
    import sum_gpu

    row = lambda n, variant, speedup: {"n": n, "dtype": "float32", "variant": variant, "speedup": speedup, "ok": True}  # noqa: E731
    rows = sum_gpu.median_runs([[row(1000, "fast", s), row(10**7, "fast", 1.1)] for s in (0.97, 0.99, 1.02)])
    assert rows[0]["speedups"] == [0.97, 0.99, 1.02] and rows[0]["speedup"] == 0.99
    assert sum_gpu.verdicts(rows)[-1] == "MISS fast >= 1.00x torch.sum at every n of 1e3, 1e7: behind at 1e3 (0.99x)"


def test_the_ladder_picture_is_drawn_from_the_json_the_benchmark_writes(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import json

    import linear_gpu

    rows = [_row("F.linear (cuBLAS, TF32 off)", 2.7), _row("cuda-naive", 200.0), _row("cuda-tiled", 4.4)]
    for r in rows:
        r["runs_ms"] = [r["median_ms"]] * 3
    record = {"gpu": "GPU", "date": "2026-12-03", "size": "4096 x 4096 x 4096 (batch x in x out)", "rows": rows,
              "verdict": linear_gpu.summarise(rows)}
    (tmp_path / "ladder.json").write_text(json.dumps(record))
    monkeypatch.setattr(sys, "argv", ["linear_gpu.py", "--plot-from", str(tmp_path / "ladder.json")])
    assert linear_gpu.main() == 0
    assert (tmp_path / "ladder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
NAMED = re.compile(r"\d{4}-\d{2}-\d{2}-[0-9a-f]{7}-(h200|h100|cpu)-[\w.+-]+")


def test_each_results_file_is_named_by_its_date_commit_and_machine():
    unnamed = [p.name for p in RESULTS.iterdir() if not NAMED.fullmatch(p.name)]
    assert not unnamed, unnamed
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[0-9a-f]{7}-h200-x\.md", common.results_name("x.md", "h200"))


def test_every_cited_results_file_exists():
    root = RESULTS.parent.parent
    texts = [root / "README.md", *root.glob("snippets/**/*.*"), *root.glob("benchmarks/*.*"), *RESULTS.glob("*.md")]
    cited = {m.group(0).rstrip(".") for p in texts if p.suffix not in (".png", ".json", ".csv")
             for m in NAMED.finditer(p.read_text(errors="replace"))}
    missing = sorted(c for c in cited if not (RESULTS / c).exists())
    assert cited and not missing, missing


def test_the_tensor_core_ladders_picture_is_drawn_from_its_json(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import json

    import linear_half_gpu

    rungs = ["cuda-mma", "cuda-pipeline", "cuda-wgmma", "cuda-tma", "cuda-warp-specialized", "cuda-cluster",
             "cuda-tma-store"]
    table = lambda scale: [{"contender": linear_half_gpu.CUBLAS, "pct_of_cublas": 100.0},  # noqa: E731
                           *({"contender": r, "pct_of_cublas": scale * (20 + 15 * k)} for k, r in enumerate(rungs))]
    record = {"gpu": "NVIDIA H200", "dtype": "bfloat16",
              "tables": {"(4096, 4096, 4096)": table(1.0), "(8192, 8192, 8192)": table(1.1), "(4096, 4096, 1024)": table(0.9)}}
    (tmp_path / "half.json").write_text(json.dumps(record))
    monkeypatch.setattr(sys, "argv", ["linear_half_gpu.py", "--plot-from", str(tmp_path / "half.json")])
    assert linear_half_gpu.main() == 0 and (tmp_path / "half.png").stat().st_size > 10_000


def test_sass_loop_takes_the_loop_that_holds_the_math_and_counts_one_bank_ffmas():
    import sass_loop

    code = ["@P0 BRA `(.L_x_3)", "MOV R1, R2", ".L_x_1:", "FFMA R4, R2, R6, R4", "IADD3 R1, R1, 0x1, RZ",
            "@P1 BRA `(.L_x_1)", ".L_x_2:", "FFMA R5, R3.reuse, R7, R9", "FFMA R5, R1, R3, R7", "FFMA R6, R1, R2, R7",
            "@!P1 BRA `(.L_x_2)", ".L_x_3:", "FFMA R8, R1, R2, R3", "FFMA R8, R1, R2, R3", "EXIT"]
    body = sass_loop.main_loop(code)  # the second loop: three FFMAs against one; the forward branch is no loop
    assert body == code[7:11]
    assert sass_loop.bank_conflicts(body) == 1  # R1, R3, R7: all odd; R3.reuse leaves two; R2 breaks the third
    assert sass_loop.bank_conflicts(code[3:6]) == 1 and sass_loop.main_loop(code[:2]) == []
    assert sass_loop.opcode("@!P0 LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64]") == "LDGSTS.E.BYPASS.128"


def test_hot_pass_takes_every_load_by_the_cheapest_route_and_no_inner_loop_twice():
    import sass_loop

    body = ["@P0 BRA `(.L_x_9)",                       # no step left: skips the copy (fewer bytes)
            "@!P1 BRA `(.L_x_5)",                      # not vec: value by value, an inner loop
            "@!P2 BRA `(.L_x_4)",                      # the whole tile inside: the short route
            "ISETP.GE.AND P3, PT, R1, R2, PT", "SEL R4, R5, R6, P3", "LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64], P3",
            "BRA `(.L_x_9)",
            ".L_x_4:", "LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64]", "BRA `(.L_x_9)",
            ".L_x_5:", "LDG.E R8, desc[UR4][R2.64]", "STS [R1], R8", "@P4 BRA `(.L_x_5)",
            ".L_x_9:", "LDSM.16.M88.4 R8, [R1]", "HMMA.1688.F32.TF32 R10, R8, R12, R10", "@!P0 BRA `(.L_x_0)"]
    route = sass_loop.hot_pass(body)
    assert route == [*body[:3], body[8], body[9], *body[15:]]  # 4 bytes a value by value: fewer than 16
    assert sass_loop.weight("LDGSTS.E.BYPASS.LTC128B.128 [R3], desc[UR24][R142.64]") == (0, 16, 0, -1)
    assert sass_loop.weight("HMMA.16816.F32.BF16 R4, R8, R12, R4") == (1, 0, 0, -1)


def test_mma_model_reads_the_ceiling_and_the_probe_and_divides_by_one_plus_o_over_c():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "probes"))
    import mma_model

    cs = mma_model.ceiling("| TF32 | mma.sync m16n8k8 | 4 | 300.0 | 70% | 50% |\n"
                           "| TF32 | mma.sync m16n8k8 | 8 | 320.0 | 79% | 60% |\n"
                           "| bfloat16 | mma.sync m16n8k16 | 8 | 640.0 | 80% | 60% |\n"
                           "dense peak: bfloat16: 100 SMs x 2,000 MHz x 2,048 FMA x 2 (tensor cores, dense)\n")
    assert cs["TF32 TFLOP/s"] == 320.0 and cs["TF32"] == pytest.approx(2e9 * 4 * 100 * 2048 / 320e12)
    assert cs["bfloat16"] == pytest.approx(2e9 * 4 * 100 * 4096 / 640e12)  # 5.12 cycles between two mma
    times = mma_model.measured("TF32 4096^3 | cuBLAS                 | 0.341 ms | 402.8 TFLOP/s | 100.0% | [0.3]\n"
                               "TF32 4096^3 | linear pipeline (default) | 0.749 ms | 183.5 TFLOP/s | 45.5% | [0.7]\n"
                               "TF32 linear_unrounded pipeline (default): WRONG 2.34e-03 > 2.18e-03\n")
    assert times == {("TF32", "cuBLAS"): 402.8, ("TF32", "linear pipeline (default)"): 183.5}
    assert mma_model.model(320.0, 5.12, 0.0) == 320.0 and mma_model.model(320.0, 5.12, 5.12) == 160.0


def test_ncu_sass_sum_counts_executed_instructions_by_kind_and_others_per_math(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "probes"))
    import ncu_sass_sum

    text = ('==PROF== Disconnected\n"Kernel Name","matmul_nt_pipeline"\n'
            '"# Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"\n'
            '"0","HMMA.1688.F32.TF32 R4, R8, R12, R4","30","1,000"\n'
            '"16","F2FP.TF32.F32.PACK_AB R8, RZ, R8","10","1,000"\n'
            '"32","@!P0 LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64]","60","500"\n"48","","0",""\n')
    table = ncu_sass_sum.rows(text)
    out = "\n".join(ncu_sass_sum.summary("tf32", table, top=2))
    assert "math 1,000; others for each math: 1.50" in out  # 1,000 conversions and 500 copies a 1,000 mma
    assert "| global | 500 | 60.0% |" in out and "| math | 1,000 | 30.0% |" in out
    assert out.index("- 60.0% @!P0 LDGSTS") < out.index("- 30.0% HMMA") and "10.0% F2FP" not in out  # top 2
    with pytest.raises(SystemExit, match="no header"):
        ncu_sass_sum.rows('"a","b"\n"1","2"\n')


def test_pipeline_probes_unrounded_family_takes_out_each_tf32_rungs_rounding(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "probes"))
    import pipeline_probe

    linear = Path(__file__).resolve().parent.parent / "snippets" / "linear"
    folder = pipeline_probe.unrounded(linear, tmp_path, "linear_unrounded")
    mma = (folder / "10_pipeline.cu").read_text()
    assert "tf32(a[i][r])" not in mma and "ra[i][r] = a[i][r]" in mma
    wgmma = (folder / "13_warp_specialized.cu").read_text()
    assert "if (false) {" in wgmma and "mbarrier_wait(&full[s], use / STAGES % 2);\n      __syncwarp();" in wgmma
    assert (folder / "task.toml").read_text() == (linear / "task.toml").read_text()
