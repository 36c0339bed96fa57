"""kplay run --sanitize: compute-sanitizer's text parsed (real GPU-box output in tests/data), the CLI's errors,
the child under a wrapping tool. The GPU runs are in test_wrong.py."""

import json
from pathlib import Path

import pytest
from rich.console import Console

from conftest import gpu
from playground.child import spawn as isolate
from playground.core import events
from playground.core.errors import KernelCrash
from playground.family import registry, request
from playground.insight import sanitize

DATA = Path(__file__).resolve().parent / "data"


def text(name: str) -> str:
    return (DATA / f"san-{name}.txt").read_text()


def test_racecheck_reports_each_race_with_its_hazards():
    found = sanitize.parse(text("tree_warp_race-racecheck"))
    assert len(found) == 20  # --print-limit 20
    assert {f.what for f in found} == {"race between read and write"}
    assert {f.kernel for f in found} == {"sum_tree_kernel<float>"}
    assert found[0].count == 124 and found[0].offset == "+0x390" and found[0].file is None
    places = sanitize.grouped(found)
    assert len(places) == 5  # five racing reads, each reported once per launch
    assert places[0][0].offset == "+0x390" and places[0][1] == 4 * 124
    assert sanitize.summary(text("tree_warp_race-racecheck")) == "20 hazards displayed (0 errors, 85 warnings)"


def test_memcheck_reads_past_the_end_one_finding_per_report_not_per_frame():
    found = sanitize.parse(text("tree_past_end-memcheck"))
    assert len(found) == 20
    assert {(f.what, f.kernel, f.offset) for f in found} == {("Invalid __global__ read of size 4 bytes",
                                                              "sum_tree_kernel<float>", "+0xc0")}
    assert sanitize.summary(text("tree_past_end-memcheck")) == "257 errors"


def test_initcheck_reads_of_unwritten_memory():
    found = sanitize.parse(text("tree_reads_unwritten-initcheck"))
    assert found and {f.what for f in found} == {"Uninitialized __global__ memory read of size 4 bytes"}
    assert sanitize.summary(text("tree_reads_unwritten-initcheck")) == "1063 errors"


def test_a_clean_run_has_no_findings():
    assert sanitize.parse(text("fast-memcheck")) == []
    assert sanitize.summary(text("fast-memcheck")) == "0 errors"


# With -lineinfo compute-sanitizer adds "in FILE:LINE" (the format of its manual, shipped in the pip wheel:
# "at unaligned_kernel()+0x100 in memcheck_demo.cu:34", "... at sumKernel(int *, int *)+0x100 in block_error.cu:51
# [508 hazards]"); the file is load_inline's copy in the build folder.
WITH_LINES = """========= COMPUTE-SANITIZER
========= Warning: Race reported between Read access at void sum_tree_kernel<float>(const T1 *, long, T1 *)+0x390 in /c/kplay_sum_tree_0123456789ab/cuda.cu:23
=========     and Write access at void sum_tree_kernel<float>(const T1 *, long, T1 *)+0x370 in /c/kplay_sum_tree_0123456789ab/cuda.cu:23 [124 hazards]
=========
========= Invalid __global__ read of size 4 bytes
=========     at void at::native::reduce_kernel<512, 1>(T3)+0x10 in /pytorch/aten/src/ATen/native/cuda/Reduce.cuh:900
=========     by thread (0,0,0) in block (0,0,0)
=========
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
"""


def test_findings_are_placed_at_the_student_s_file_and_line_and_pytorch_s_are_dropped():
    fam = registry.find("sum")
    r = sanitize.record("racecheck", WITH_LINES, fam, fam.pick_variants("cuda", "all"), "/tmp/x.log")
    assert r["findings"] == [{"what": "race between read and write", "kernel": "sum_tree_kernel<float>",
                              "at": f"{fam.path / 'sum_tree.cu'}:23", "count": 124, "unit": "hazards"}]


def test_the_report_says_which_tool_found_what_and_how_many_in_80_columns():
    fam = registry.find("sum")
    found = sanitize.record("racecheck", WITH_LINES, fam, fam.pick_variants("cuda", "all"), "/tmp/x.log")
    console = Console(width=80, record=True, color_system=None)
    console.print(sanitize.report({"sanitize": {**found, "crash": None}}))
    out = console.export_text()
    assert "racecheck: 124 hazards in sum_tree_kernel<float> at sum_tree.cu:23" in out
    assert "racecheck: FAIL" in out and max(map(len, out.splitlines())) <= 80


def test_a_crash_is_reported_with_the_findings():
    fam = registry.find("sum")
    found = sanitize.record("memcheck", text("tree_past_end-memcheck"), fam, fam.pick_variants("cuda", "tree"), "x")
    console = Console(width=80, record=True, color_system=None)
    console.print(sanitize.report({"sanitize": {**found, "crash": "tree raised at n=1: unspecified launch failure"}}))
    out = console.export_text()
    assert "the run ended: tree raised at n=1" in out
    assert "memcheck: 20 errors in sum_tree_kernel<float> at offset +0xc0 (no -lineinfo)" in out
    assert "memcheck: FAIL; its summary: 257 errors" in out


@pytest.mark.parametrize("args, says", [
    (["--sanitize", "memchek"], "--sanitize memchek: valid: memcheck, racecheck, synccheck, initcheck"),
    (["--sanitize", "memcheck", "--device", "cpu"], "drop --device cpu"),
    (["--sanitize", "memcheck", "--variant", "cpp"], "sum/cpp is a cpu variant"),
])
def test_sanitize_bad_input_is_one_line(kplay, monkeypatch, args, says):
    monkeypatch.setattr("playground.compiler.toolchain.cuda_tool", lambda name: "/bin/true")  # the tool is there
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)  # and a GPU
    result = kplay("run", "sum", *args)
    assert result.exit_code == 2, result.output
    assert says in result.output and len(result.output.strip().splitlines()) == 1


def test_sanitize_without_the_tool_is_one_line_naming_the_package(kplay, monkeypatch):
    monkeypatch.setattr("playground.compiler.toolchain.cuda_tool", lambda name: None)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)  # a GPU machine without the tool
    result = kplay("run", "sum", "--sanitize", "racecheck")
    assert result.exit_code == 2
    assert "compute-sanitizer not found: pip install nvidia-cuda-sanitizer-api" in result.output


@pytest.mark.skipif(gpu(), reason="the no-GPU message")
@pytest.mark.parametrize("tool", ["/bin/true", None])  # with the tool, and without it: installing it would not help
def test_sanitize_without_a_gpu_is_one_line(kplay, monkeypatch, tool):
    monkeypatch.setattr("playground.compiler.toolchain.cuda_tool", lambda name: tool)
    result = kplay("run", "sum", "--sanitize", "memcheck")
    assert result.exit_code == 2
    assert "--sanitize memcheck: no CUDA GPU is visible here" in result.output and "Traceback" not in result.output


def test_every_cuda_build_has_lineinfo(tmp_path):
    """A sanitized run's findings get file and line from the same build a plain run uses (no second compile)."""
    from playground.compiler import build
    from playground.family import render

    fam = registry.find("sum")
    v = fam.variants["fast"]
    _, args = build.identity(fam, v, render.sources(fam, v, fam.parse_params([])))
    assert "-lineinfo" in args["extra_cuda_cflags"]


@pytest.mark.slow
def test_the_child_runs_under_a_wrapping_tool_through_a_file():
    """`env` stands for compute-sanitizer or ncu: a launcher that need not pass the pipe on."""
    req = request.make("sum", device="cpu", sizes={"n": 1000}, bench=False)
    seen = []
    result = isolate.run(req, lambda event, **data: seen.append(event), under=["env"], env={"KPLAY_PROBE": "1"})
    assert result["ok"] and result["exit_code"] == 0
    assert "check" in seen  # the events came through the file as they happened
    json.dumps(result)


@pytest.mark.cuda
def test_a_race_is_shown_at_the_student_s_file_and_line(kplay, tmp_path):
    from test_wrong import FAMILIES, wrong_folder

    from playground.family.registry import tomllib

    entry = next(e for e in tomllib.loads((Path(__file__).parent / "wrong/sum/wrong.toml").read_text())["wrong"]
                 if e.get("name") == "tree_warp_race")
    assert "sum" in FAMILIES
    folder = wrong_folder(tmp_path / "sum", "sum", entry)
    result = kplay("run", folder, "--device", "cuda", "--sanitize", "racecheck", "--n", "1e5", "--json")
    assert result.exit_code == 1, result.output
    r = json.loads(result.output[result.output.index("{"):])
    first = r["sanitize"]["findings"][0]
    assert first["kernel"] == "sum_tree_kernel<float>" and first["unit"] == "hazards" and first["count"] > 0
    file, line = first["at"].rsplit(":", 1)  # -lineinfo, mapped from the build's cuda.cu to the student's file
    assert Path(file).resolve() == (folder / "sum_tree.cu").resolve() and int(line) > 0, first
    assert all(v["check"]["ok"] for v in r["variants"])  # the numbers were right: only the sanitizer saw it


def fake_sanitizer(tmp_path: Path, fixture: str, then: str = 'exec "$@"') -> str:
    """Stands for compute-sanitizer: writes a real report (tests/data) to --log-file, then runs the program."""
    script = tmp_path / "compute-sanitizer"
    script.write_text(f'#!/bin/sh\nwhile [ "$1" != "--log-file" ]; do shift; done\nshift\n'
                      f'cp {DATA / f"san-{fixture}.txt"} "$1"\nshift\n{then}\n')
    script.chmod(0o755)
    return str(script)


@pytest.mark.slow
def test_a_finding_fails_a_run_whose_numbers_are_right(tmp_path, monkeypatch):
    monkeypatch.setattr(sanitize, "executable", lambda: fake_sanitizer(tmp_path, "tree_warp_race-racecheck"))
    req = request.make("sum", device="cpu", sizes={"n": 1000}, bench=False, lineinfo=True)
    r = sanitize.run(req, "racecheck")
    assert all(v["check"]["ok"] for v in r["variants"])
    assert (r["ok"], r["exit_code"]) == (False, 1)
    assert r["why"] == "racecheck found problems at 5 places in the kernel"
    assert r["sanitize"]["summary"] == "20 hazards displayed (0 errors, 85 warnings)"


@pytest.mark.slow
def test_a_sanitized_run_checks_the_sanitize_sizes_then_the_requested_size(tmp_path, monkeypatch):
    """Not the test sizes: under racecheck, cuda-smem's call at linear's 1000 x 1000 x 1023 took over 120 s."""
    monkeypatch.setattr(sanitize, "executable", lambda: fake_sanitizer(tmp_path, "fast-memcheck"))
    cases = []
    seen = lambda event, **data: cases.append(data["case"].split()[0]) if event == events.CHECK else None  # noqa: E731
    req = request.make("sum", device="cpu", sizes={"n": 1000}, bench=False, lineinfo=True)
    assert sanitize.run(req, "memcheck", seen)["ok"]
    sizes = [f"n={s['n']}" for s in registry.find("sum").sanitize_sizes]
    assert "n=65537" in sizes and "n=2" not in sizes  # n=2 is a test size
    assert cases[:len(sizes)] == sizes and set(cases[len(sizes):]) == {"n=1000"}  # then the requested size's cases


@pytest.mark.slow
def test_a_run_the_finding_ended_still_reports_the_finding(tmp_path, monkeypatch):
    monkeypatch.setattr(sanitize, "executable", lambda: fake_sanitizer(tmp_path, "tree_past_end-memcheck", "exit 1"))
    req = request.make("sum", device="cpu", sizes={"n": 1000}, bench=False, lineinfo=True)
    r = sanitize.run(req, "memcheck")
    assert r["exit_code"] == 1 and "variants" not in r
    assert r["sanitize"]["crash"].startswith("kernel crashed: exit code 1")
    assert r["sanitize"]["findings"][0]["count"] == 20


@pytest.mark.slow
def test_a_clean_tool_run_keeps_the_run_s_own_verdict(tmp_path, monkeypatch):
    monkeypatch.setattr(sanitize, "executable", lambda: fake_sanitizer(tmp_path, "fast-memcheck"))
    r = sanitize.run(request.make("sum", device="cpu", sizes={"n": 1000}, bench=False, lineinfo=True), "memcheck")
    assert (r["ok"], r["exit_code"], r["sanitize"]["findings"]) == (True, 0, [])


@pytest.mark.slow
def test_a_tool_run_with_no_summary_is_not_called_clean(tmp_path, monkeypatch):
    """A log the tool could not write (a folder it cannot reach) has no summary: an error, never "clean"."""
    tool = tmp_path / "compute-sanitizer"
    tool.write_text('#!/bin/sh\nwhile [ "$1" != "--log-file" ]; do shift; done\nshift 2\nexec "$@"\n')
    tool.chmod(0o755)
    monkeypatch.setattr(sanitize, "executable", lambda: str(tool))
    with pytest.raises(KernelCrash, match=r"^no summary \(its log not written\), so not called clean$"):
        sanitize.run(request.make("sum", device="cpu", sizes={"n": 1000}, bench=False, lineinfo=True), "memcheck")


def test_the_tool_s_own_error_is_kept_for_the_crash_message():
    # what compute-sanitizer 2026.4 (the pip wheel) wrote on this GPU-less machine
    log = ("========= COMPUTE-SANITIZER\n========= Error: process didn't terminate successfully\n"
           "========= Error: Target application terminated before first instrumented API call\n")
    assert sanitize.tool_errors(log)[-1] == ("compute-sanitizer: Error: Target application terminated before first "
                                             "instrumented API call")
    assert sanitize.parse(log) == []


def test_a_tool_may_finish_its_report_after_the_worker_is_done(tmp_path):
    """ncu prints its CSV, compute-sanitizer its summary, once the program has ended: the parent waits for it."""
    late = tmp_path / "report.txt"
    tool = tmp_path / "tool"
    tool.write_text(f'#!/bin/sh\n"$@"\nsleep 1\necho done > {late}\n')
    tool.chmod(0o755)
    req = request.make("sum", device="cpu", sizes={"n": 10}, bench=False)
    assert isolate.run(req, under=[str(tool)])["ok"]
    assert late.read_text() == "done\n"
