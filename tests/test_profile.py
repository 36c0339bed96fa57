"""kplay profile: the parsers against the GPU box's real output (tests/data), the CLI's errors, the GPU path."""

import csv
import io
import json
import re
import time
from pathlib import Path

import pytest
from rich.console import Console

from conftest import gpu
from playground.insight import profile
from playground.run import profile as child_profile

DATA = Path(__file__).resolve().parent / "data"
N = 10**8  # the fixtures' size: one call at n = 1e8, float32


def trace(name: str) -> list[dict]:
    return child_profile.gpu_work(json.loads((DATA / f"trace-{name}.json").read_text())["traceEvents"])


def ncu_text() -> str:
    return (DATA / "ncu-details.csv").read_text()


def test_profiler_records_give_each_kernel_its_time_and_launch():
    memset, kernel = trace("fast")
    assert memset["kind"] == "memset" and memset["us"] == pytest.approx(0.832)
    assert kernel["short"] == "sum_fast_kernel<float>"
    assert (kernel["grid"], kernel["block"], kernel["registers"], kernel["shared_bytes"]) == ([1056, 1, 1], [256, 1, 1], 32, 33)
    assert kernel["us"] == pytest.approx(90.688)


def test_a_multi_pass_kernel_lists_every_pass_in_launch_order():
    grids = [k["grid"][0] for k in trace("tree")]
    assert grids == [390625, 1526, 6, 1]  # 1e8 / 256, then / 256 again, down to one block


def test_one_pass_over_several_calls_splits_at_the_spin_kernels():
    """kplay profiles every contender in one torch.profiler pass (a second pass after CUPTI's teardown
    records nothing), a spin kernel before each call: the work after each spin is that call's."""
    from playground.compiler import kernel_resources as resources
    spin = lambda ts: {"cat": "kernel", "name": "at::cuda::(anonymous namespace)::spin_kernel(long)", "ts": ts, "dur": 1}
    calls = [json.loads((DATA / f"trace-{name}.json").read_text())["traceEvents"] for name in ("tree", "fast")]
    shifted = [dict(e, ts=e["ts"] + 1e7) for e in calls[1] if "ts" in e]  # the second call, later
    first_ts = min(e["ts"] for e in calls[0] if e.get("cat") == "kernel")
    events = [*shifted, spin(first_ts - 10), *calls[0], spin(first_ts + 5e6)]  # out of order, as a trace may be
    tree, fast = resources.split(events, 2)
    assert [k["grid"][0] for k in child_profile.gpu_work(tree)] == [390625, 1526, 6, 1]
    assert [k["kind"] for k in child_profile.gpu_work(fast)] == ["memset", "kernel"]
    with pytest.raises(RuntimeError, match="the profiler saw 2 of 3 calls"):
        resources.split(events, 3)


def test_a_long_template_name_is_cut_to_fit_a_column():
    (_, kernel) = trace("torch.sum")
    assert kernel["short"] == "reduce_kernel<512, 1, ...>"


def test_ncu_csv_gives_throughput_occupancy_and_one_hint_per_kernel():
    kernels = profile.ncu_kernels(ncu_text())
    assert [k["short"] for k in kernels] == ["reduce_kernel<512, 1, ...>", *["sum_tree_kernel<float>"] * 4, "sum_fast_kernel<float>"]
    fast = kernels[-1]
    assert (fast["memory_pct"], fast["compute_pct"], fast["dram_pct"], fast["l2_pct"]) == (89.30, 9.45, 89.30, 90.71)
    assert (fast["achieved_occupancy_pct"], fast["theoretical_occupancy_pct"]) == (99.04, 100)
    assert fast["hint"] == ("This workload is utilizing greater than 80.0% of the available compute or memory "
                            "performance of the device.")  # no OPT rule: the INF one


def test_ncu_is_asked_for_every_section_whose_figures_are_read():
    """The fixture's log came from these sections (ncu lists each by its identifier, with no metric); without
    LaunchStats the H200's profile had no registers or shared memory."""
    rows = [ln.split('","') for ln in ncu_text().splitlines() if ln.startswith('"')]
    logged = {r[13] for r in rows[1:] if r[14] == ""}
    asked = {profile.NCU_ARGS[i + 1] for i, a in enumerate(profile.NCU_ARGS) if a == "--section"}
    assert logged == asked == {"SpeedOfLight", "Occupancy", "LaunchStats"}


def test_the_tensor_pipes_are_asked_for_only_where_ncu_knows_them_and_read_from_its_csv(tmp_path):
    """ncu fails a whole profile on a metric it does not know: --query-metrics says which tensor pipes it has.
    Their rows (section "Command line profiler metrics") give each kernel its tensor%; the table shows a
    column only when one kernel has a figure."""
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\necho 'Device NVIDIA H200 (GH100)'\n"
                    "echo 'sm__pipe_tensor_op_gmma_cycles_active   Counter  cycle  # of cycles where GMMA was active'\n")
    fake.chmod(0o755)
    assert profile.tensor_metrics(str(fake)) == ["--metrics", "sm__pipe_tensor_op_gmma_cycles_active" + profile.TENSOR_ROLLUP]
    assert profile.tensor_metrics(str(tmp_path / "absent")) == []
    rows = [ln for ln in ncu_text().splitlines() if ln.startswith('"')]
    fast = next(r for r in rows if "sum_fast_kernel" in r and "Duration" in r)
    row = fast.replace('"GPU Speed Of Light Throughput","Duration"', '"Command line profiler metrics",'
                       '"sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"')
    row = row.replace('"ns","93,696"', '"%","87.5"')
    kernels = profile.ncu_kernels(ncu_text() + row + "\n")
    assert kernels[-1]["gmma_pct"] == 87.5 and "gmma_pct" not in kernels[0]
    r = profiled()
    for c, k in zip(r["contenders"], (kernels[0], kernels[1], kernels[-1])):
        c["kernels"] = [{**c["kernels"][0], "short": k["short"], "ncu": k}]
    r["ncu"] = None
    render = lambda lines: _text(*lines)  # noqa: E731
    shown = render(profile._ncu_lines(r))
    assert "tensor%" in shown and re.search(r"sum_fast_kernel<float>.*\b88\s*$", shown, re.M), shown
    r["contenders"][1]["kernels"][0]["short"] = "matmul_nt_wgmma<__nv_bfloat16>"  # 30 characters: still no header cut
    shown = render(profile._ncu_lines(r))
    assert "…" not in shown and max(map(len, shown.splitlines())) <= 80, shown
    for c in r["contenders"]:
        c["kernels"][0]["ncu"].pop("gmma_pct", None)
    assert "tensor%" not in render(profile._ncu_lines(r))


def _text(*renderables) -> str:
    console = Console(width=80, record=True, color_system=None)
    for x in renderables:
        console.print(x)
    return console.export_text()


def test_the_hint_is_the_first_opt_rule_in_one_sentence():
    tree = profile.ncu_kernels(ncu_text())[1]
    assert tree["hint"].startswith("The difference between calculated theoretical (100.0%) and measured achieved")
    assert tree["hint"].endswith("during the kernel execution.")
    last_pass = profile.ncu_kernels(ncu_text())[4]
    assert last_pass["hint"] == ("This kernel grid is too small to fill the available resources on this device, "
                                 "resulting in only 0.0 full waves across all SMs.")


def profiled() -> dict:
    """A profile record as the child sends it, from the three real traces, in the order ncu saw them."""
    contenders = [{"kind": "baseline", "name": "torch.sum", "kernels": trace("torch.sum")},
                  {"kind": "variant", "name": "tree", "kernels": trace("tree")},
                  {"kind": "variant", "name": "fast", "kernels": trace("fast")}]
    return {"family": "sum", "device": "NVIDIA H200", "dtype": "float32", "sizes": {"n": N}, "params": {},
            "nbytes": 4 * N, "peak_gbps": 2 * 3201000e3 * 6016 / 8 / 1e9, "contenders": contenders}


def test_the_call_s_gb_per_s_is_its_bytes_over_its_gpu_time():
    r = profiled()
    profile.rates(r)
    fast = r["contenders"][2]
    assert fast["gpu_us"] == pytest.approx(90.688 + 0.832)
    assert fast["gbps"] == pytest.approx(4e8 / 91.52e-6 / 1e9)
    assert fast["pct_peak"] == pytest.approx(100 * fast["gbps"] / 4813.8, rel=1e-3)
    assert fast["kernels"][1]["share_pct"] == pytest.approx(100 * 90.688 / 91.52)


def ncu_with_spins(starts=("0", "1", "5")) -> str:
    """The real log with a spin kernel's row before each call's first kernel (IDs 0: torch.sum, 1: tree's four
    passes, 5: fast), as the child launches one in the NVTX range before each call."""
    out, seen = [], set()
    for ln in ncu_text().splitlines():
        row = next(csv.reader([ln])) if ln.startswith('"') else None
        if row and row[0] in starts and row[0] not in seen:
            seen.add(row[0])
            spin = io.StringIO()
            csv.writer(spin, quoting=csv.QUOTE_ALL, lineterminator="").writerow(
                [f"spin{row[0]}", *row[1:6], "void at::cuda::(anonymous namespace)::spin_kernel(long)", *row[7:]])
            out.append(spin.getvalue())
        out.append(ln)
    return "\n".join(out) + "\n"


def bare(calls: int = 3) -> dict:
    """The record the child under ncu sends: no kernels yet, and which contender made each call, in order."""
    r = profiled()
    for c in r["contenders"]:
        c["kernels"] = []
    return r | {"calls": [[i, "forward"] for i in range(calls)]}


def test_ncu_gives_each_call_its_kernels_with_time_launch_and_figures():
    r = bare()
    assert profile.from_ncu(r, ncu_with_spins()) is None and "calls" not in r
    base, tree, fast = (c["kernels"] for c in r["contenders"])
    assert [k["short"] for k in fast] == ["sum_fast_kernel<float>"]  # the spin kernels are gone
    k = fast[0]
    assert (k["grid"], k["block"], k["registers"], k["shared_bytes"], k["us"]) == ([1056, 1, 1], [256, 1, 1], 32, 33, 93.696)
    assert k["ncu"]["memory_pct"] == 89.30 and k["step"] == "forward" and k["kind"] == "kernel"
    assert [k["grid"][0] for k in tree] == [390625, 1526, 6, 1]
    assert (base[0]["grid"], base[0]["shared_bytes"]) == ([1, 763, 1], 16 + 2048)  # static + dynamic


def test_ncu_that_saw_other_calls_is_left_out_with_a_note():
    r = bare(calls=4)
    assert profile.from_ncu(r, ncu_with_spins()) == "ncu saw 3 of the 4 calls: its figures are left out"
    assert profile.from_ncu(bare(), ncu_text()).startswith("ncu profiled no kernel")  # no spin: no call's begin seen


def test_no_counter_access_is_one_line_saying_how_to_enable_it(tmp_path, monkeypatch):
    # ncu's message when the driver keeps the counters for admins (the text of NVIDIA's ERR_NVGPUCTRPERM page)
    text = ("==PROF== Connected to process 1750\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
            "access NVIDIA GPU Performance Counters on the target device 0.\n")
    note = profile.from_ncu(bare(), text)
    assert "ERR_NVGPUCTRPERM" in note and "NVreg_RestrictProfilingToAdminUsers=0" in note and "root" in note
    params = tmp_path / "params"  # the same, known before ncu runs: the driver's own setting, and not root
    monkeypatch.setattr(profile, "ADMIN_ONLY", params)
    assert profile.counters_locked() is None  # no such file: ncu is tried
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert profile.counters_locked() == profile.NO_COUNTERS
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert profile.counters_locked() is None
    params.write_text("RmProfilingAdminOnly: 0\n")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert profile.counters_locked() is None


def test_the_report_fits_80_columns():
    r = bare()
    r["ncu"] = profile.from_ncu(r, ncu_with_spins())
    profile.rates(r)
    console = Console(width=80, record=True, color_system=None)
    console.print(profile.report(r))
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80
    assert "sum_fast_kernel<float>" in text and "1056×256" in text and "390625×256" in text
    assert "fast: 93.7 µs on the GPU · 4,269 GB/s (89% of peak)" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("fast ") and "/ 100%" in ln).split()
    assert row == ["fast", "sum_fast_kernel<float>", "89", "9", "89", "91", "99", "/", "100%"]
    assert sum("too small to fill" in ln for ln in text.splitlines()) == 1  # a hint shown once


@pytest.mark.skipif(gpu(), reason="the no-GPU message")
def test_profile_without_a_gpu_is_one_line(kplay):
    result = kplay("profile", "sum", "--variant", "fast", "--n", "1e5")
    assert result.exit_code == 2
    assert "kplay profile: no CUDA GPU is visible here" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("args, says", [
    (["sum", "--device", "cpu"], "profiles CUDA kernels: use --device cuda"),
    (["sum", "--variant", "cpp"], "sum/cpp is a cpu variant"),
    (["sum", "--n", "0"], "--n 0: must be at least 1"),
])
def test_profile_bad_input_is_one_line(kplay, args, says):
    result = kplay("profile", *args)
    assert result.exit_code == 2, result.output
    assert says in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.cuda
def test_peak_bandwidth_from_the_device_attributes():
    import torch

    peak = child_profile.peak_gbps()
    assert peak and peak > 100
    if "H200" in torch.cuda.get_device_name():
        assert 4700 < peak < 4900  # 2 x 3.2 GHz x 6016 bits / 8 = 4.8 TB/s


@pytest.mark.cuda
@pytest.mark.slow
def test_profile_sum_fast_at_1e8(kplay):
    start = time.perf_counter()
    result = kplay("profile", "sum", "--variant", "fast", "--n", "1e8", "--json")
    took = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    r = json.loads(result.output[result.output.index("{"):])
    fast, base = r["contenders"]
    assert (fast["name"], base["name"]) == ("fast", "torch.sum")
    assert any(k["short"] == "sum_fast_kernel<float>" and k["grid"] and k["registers"] for k in fast["kernels"])
    assert fast["gbps"] > 1000 and 0 < fast["pct_peak"] < 100
    if r["ncu"] is None:  # ncu ran, could read the counters, and gave every kernel's row
        assert all(k["ncu"]["memory_pct"] > 0 and k["grid"] and k["us"] > 0 for c in r["contenders"] for k in c["kernels"])
        assert not any("spin_kernel" in k["name"] for c in r["contenders"] for k in c["kernels"])
    print(f"kplay profile sum --variant fast --n 1e8: {took:.1f} s (ncu: {r['ncu'] or 'ran'})")
