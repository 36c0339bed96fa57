"""The device's peaks (device.py), % of peak in runs and reports, every family's roofline hooks, the roofline PNG."""

import json
import re
import struct
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

import playground
from playground.run import peaks as device
from playground.report import plot, tables as report
from playground.family import registry, spec as specs
from playground.run.peaks import Peaks, from_attributes
from playground.core.errors import UsageError

# The H200 SXM's attributes as torch 2.11 reported them on the GPU box (tests/data/ncu-details.csv): 132 SMs
# at 1,980 MHz (max), memory at 3,201 MHz on a 6,016-bit bus: not the six HBM3e stacks' 6,144 bits, but in the
# same ratio as the H200's 141 GB to those stacks' 144 GB. CUDA reports the clocks in kHz.
H200 = dict(sm_count=132, sm_clock_khz=1_980_000, mem_clock_khz=3_201_000, bus_bits=6016)


def h200() -> Peaks:
    return from_attributes("NVIDIA H200", (9, 0), **H200)


def test_h200_peaks_match_the_published_figures():
    p = h200()
    assert p.bandwidth_gbps == pytest.approx(2 * 3.201e9 * 6016 / 8 / 1e9)  # 4,814.3 GB/s
    assert p.bandwidth_gbps == pytest.approx(4800, rel=0.01)  # published: 4.8 TB/s
    assert p.flops("float32") == pytest.approx(132 * 1.98e9 * 128 * 2 / 1e9)  # 66,908 GFLOP/s
    assert p.flops("float32") == pytest.approx(67_000, rel=0.02)  # published: FP32 67 TFLOPS
    assert p.flops("float64") == pytest.approx(34_000, rel=0.02)  # published: FP64 34 TFLOPS
    assert p.flops("int32") is None
    assert p.flops("bfloat16") == p.flops("float16") == pytest.approx(132 * 1.98e9 * 2048 * 2 / 1e9)  # 1,070 TFLOP/s
    assert p.flops("bfloat16") == pytest.approx(989_000, rel=0.1)  # published: 989 TFLOPS dense
    assert p.source["bfloat16"] == "132 SMs x 1,980 MHz x 2,048 FMA x 2 (tensor cores, dense)"
    assert p.flops("tf32") == pytest.approx(p.flops("bfloat16") / 2)  # published: 494.7 TFLOPS dense (H100 SXM)
    assert p.source["bandwidth"] == "2 x 3,201 MHz x 6,016 bits / 8"
    assert p.source["float32"] == "132 SMs x 1,980 MHz x 128 FMA x 2"


def test_an_unknown_compute_capability_has_a_bandwidth_and_no_flops():
    p = from_attributes("future", (99, 0), **H200)
    assert p.bandwidth_gbps > 4000 and p.gflops == {} and p.flops("float32") is None
    assert p.roof(4e9, 1e12, "float32") == (pytest.approx(4e9 / (p.bandwidth_gbps * 1e9)), "memory")


def test_the_roof_is_the_ceiling_that_binds():
    p = h200()
    seconds, bound = p.roof(4e8, 1e8, "float32")  # sum: a quarter FLOP per byte
    assert bound == "memory" and seconds == pytest.approx(4e8 / 4814.304e9)
    seconds, bound = p.roof(12e6, 2 * 1024**3, "float32")  # linear 1024: 179 FLOP/byte, above the ridge (13.9)
    assert bound == "compute" and seconds == pytest.approx(2 * 1024**3 / 66908.16e9)
    assert p.roof(0, 0, "float32") is None


def fake_gpu(monkeypatch, props):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    device.peaks.cache_clear()


def test_peaks_from_torchs_device_properties(monkeypatch):
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, clock_rate=1_980_000,
                            memory_clock_rate=3_201_000, memory_bus_width=6016)
    fake_gpu(monkeypatch, props)
    monkeypatch.setattr(device, "_cuda_attribute", lambda *a: pytest.fail("torch had every property"))
    try:
        assert device.peaks("cuda") == h200()
        assert device.peaks("cpu") is None
    finally:
        device.peaks.cache_clear()


def test_peaks_fall_back_to_cudaDeviceGetAttribute(monkeypatch):
    """A torch whose properties lack the clocks: the runtime's attributes, by their cudaDeviceAttr numbers."""
    fake_gpu(monkeypatch, SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132))
    runtime = {13: 1_980_000, 36: 3_201_000, 37: 6016}  # cudaDevAttrClockRate, MemoryClockRate, GlobalMemoryBusWidth
    monkeypatch.setattr(device, "_cuda_attribute", lambda attribute, index: runtime.get(attribute))
    try:
        assert device.peaks("cuda") == h200()
        runtime.pop(36)  # an attribute that cannot be read: no peak rather than a wrong one
        device.peaks.cache_clear()
        assert device.peaks("cuda") is None
    finally:
        device.peaks.cache_clear()


# ---- every family's hooks, against hand arithmetic --------------------------------------------------------

def hooks(family):
    return specs.load(registry.find(family))


def test_sum_hooks():
    s = hooks("sum")
    assert s.traffic({"n": 1000}, torch.float64) == 8000 and s.traffic({"n": 1000}, torch.float32) == 4000
    assert s.flops({"n": 1000}) == 1000


def test_print_array_hooks():
    s = hooks("print_array")
    assert s.traffic({"n": 8}, torch.int32) == 32 and s.flops({"n": 8}) == 0


def test_linear_hooks():
    s, sizes = hooks("linear"), {"batch": 64, "in": 48, "out": 40}
    assert s.flops(sizes) == 2 * 64 * 48 * 40 == 245_760
    # x (64 x 48), W (40 x 48), b (40) read, y (64 x 40) written: 7,592 floats
    assert s.traffic(sizes, torch.float32) == (3072 + 1920 + 40 + 2560) * 4 == 30_368
    assert s.traffic(sizes, torch.float64) == 2 * 30_368


def test_lltm_hooks():
    s, sizes = hooks("lltm"), {"batch": 16, "features": 32, "state": 128}
    assert s.flops(sizes) == 3 * 2 * 16 * 384 * 160
    forward = (512 + 61_440 + 384 + 2 * 2048) + (2 * 2048 + 6144 + 2560)  # input W b old_h old_cell; h cell gates X
    backward = (3 * 2048 + 6144 + 2560 + 61_440) + (512 + 61_440 + 384 + 2 * 2048)  # grads, gates, X, W; 5 gradients
    assert forward + backward == 221_952 and s.traffic(sizes, torch.float32) == 221_952 * 4


# ---- % of peak in a run, with the H200's peaks put in place of the CPU's unknown ones -----------------------

@pytest.fixture
def peaks_on_cpu(monkeypatch):
    monkeypatch.setattr(device, "peaks", lambda d: h200())


def test_pct_peak_is_of_the_memory_ceiling_for_sum(peaks_on_cpu):
    r = playground.run("sum", sizes={"n": 10_000}, device="cpu", budget_s=0.02).to_dict()
    assert r["peak_gbps"] == pytest.approx(4814.304) and r["peak_gflops"] == pytest.approx(66908.16)
    assert r["bound"] == "memory" and r["traffic"] == 40_000 and r["flops"] == 10_000 and r["copy_gbps"] is None
    for t in (r["variants"][0], r["baselines"]["torch.sum"]):
        assert t["pct_peak"] == pytest.approx(100 * t["gbps"] / 4814.304)
    text = rendered(report.run_report(r))
    assert "% peak" in text and "% peak: of the memory ceiling, which binds at 0.25 FLOP/byte" in text
    assert "memory ceiling: 4,814 GB/s = 2 x 3,201 MHz x 6,016 bits / 8" in text
    assert "compute ceiling: 66,908 GFLOP/s float32 = 132 SMs x 1,980 MHz x 128 FMA x 2" in text


@pytest.mark.slow
def test_pct_peak_is_of_the_compute_ceiling_for_a_large_linear(peaks_on_cpu):
    r = playground.run("linear", sizes={"batch": 128, "in": 128, "out": 128}, device="cpu", budget_s=0.02).to_dict()
    assert r["bound"] == "compute" and r["flops"] / r["traffic"] > 13.9  # past the H200's float32 ridge point
    v = r["variants"][0]
    assert v["pct_peak"] == pytest.approx(100 * v["gflops"] / 66908.16)
    text = rendered(report.run_report(r))
    assert re.search(r"GFLOP/s +% peak", text) and "of the compute ceiling, which binds at 21.3" in text


def test_cpu_runs_show_no_peak():
    r = playground.run("sum", sizes={"n": 1000}, device="cpu", budget_s=0.02).to_dict()
    assert r["peak_gbps"] is r["peak_gflops"] is r["bound"] is None
    assert r["variants"][0]["pct_peak"] is None and "% peak" not in rendered(report.run_report(r))


def rendered(renderable) -> str:
    console = Console(width=80, record=True, color_system=None)
    console.print(renderable)
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80
    return text


def test_a_gpu_run_report_fits_80_columns_with_its_peak_notes():
    r = gpu_record(n=10**9, seconds=1e-3, copy=4200.0)
    text = rendered(report.run_report(r))
    assert "% peak" in text and "83%" in text and "copy: 4,200 GB/s, a device-to-device copy measured here" in text and "% copy" not in text


@pytest.mark.parametrize("clock, dropped, says", [
    ((1980, 1980, 1980), 0, "SM clock 1,980 MHz throughout\n"),
    ((1410, 1755, 1980), 3, "SM clock 1,410–1,980 MHz (median 1,755); dropped 3 samples under 75% of max\n"),
])
def test_the_sm_clock_line_says_how_the_clock_held(clock, dropped, says):
    r = gpu_record(n=10**8, seconds=1e-4)
    r["variants"][0]["time"] = {**r["variants"][0]["time"], "clock_mhz": clock, "dropped": dropped}
    assert says in rendered(report.run_report(r))


def gpu_record(n: int, seconds: float, copy: float | None = None, dtype="float32", bound="memory") -> dict:
    """A sum run on an H200 as `kplay run --json` gives it (the time chosen): 4 bytes and one FLOP per element."""
    p = h200()
    stats = {"median_s": seconds, "q1_s": seconds, "q3_s": seconds, "samples": 50, "method": "CUDA events",
             "noise": 0.004, "tail_s": None, "tail_floor_s": None, "dropped": 0, "clock_mhz": None}
    roof = p.roof(4 * n, n, dtype)[0]

    def timed(**more):
        return {"time": stats, "timings": {"call": stats}, "walls": {}, "clock": "timings", "gbps": 4 * n / seconds / 1e9,
                "gflops": n / seconds / 1e9, "pct_peak": 100 * roof / seconds, **more}

    check = {"ok": True, "max_abs_err": 0.0, "tolerance": 1.0, "tolerance_source": "tree", "cases": [f"n={n}"],
             "mismatches": []}
    return {"family": "sum", "device": "cuda", "dtype": dtype, "seed": 0, "sizes": {"n": n}, "params": {},
            "torch": torch.__version__, "peak_gbps": p.bandwidth_gbps, "peak_gflops": p.flops(dtype),
            "peak_source": p.source, "copy_gbps": copy, "traffic": 4 * n, "flops": n, "bound": bound,
            "rate": "gflops" if bound == "compute" else "gbps", "baselines": {"torch.sum": timed(name="torch.sum")},
            "variants": [timed(variant="fast", note="", build={}, check=check, speedup=1.0, speedups={},
                               stdout="", extra={})],
            "warnings": [], "ok": True, "exit_code": 0, "why": None}


# ---- the roofline PNG ----------------------------------------------------------------------------------------

def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    return struct.unpack(">II", data[16:24])


def test_roofline_on_a_gpu_draws_both_ceilings_and_a_point_per_size(tmp_path):
    pytest.importorskip("matplotlib")
    records = [gpu_record(n, n * 4 / 4e12, copy=4200.0) for n in (10**7, 10**8, 10**9)]
    fig = plot.roofline(records, "n", tmp_path / "roof.png")
    width, height = png_size(tmp_path / "roof.png")
    assert width >= 600 and height >= 400
    _, labels = fig.axes[0].get_legend_handles_labels()
    assert labels == ["fast", "torch.sum (the reference)",
                      "device peak: memory 4,814 GB/s, float32 66,908 GFLOP/s (CUDA cores)", "copy, measured (4,200 GB/s)"]
    points = plot.roofline_points(records, "n")
    assert list(points) == ["fast", "torch.sum"]
    assert [(x, n) for x, _, n in points["fast"]] == [(0.25, 10**7), (0.25, 10**8), (0.25, 10**9)]
    assert all(y == pytest.approx(1000) for _, y, _ in points["fast"])  # 4 TB/s at a quarter FLOP per byte
    assert "no peak" not in fig.axes[0].get_title()


def test_roofline_on_the_cpu_has_points_and_no_ceilings(tmp_path):
    pytest.importorskip("matplotlib")
    records = [gpu_record(n, n * 4 / 30e9) | {"device": "cpu", "peak_gbps": None, "peak_gflops": None, "bound": None}
               for n in (10**5, 10**6)]
    fig = plot.roofline(records, "n", tmp_path / "cpu.png")
    png_size(tmp_path / "cpu.png")
    assert fig.axes[0].get_legend_handles_labels()[1] == ["fast", "torch.sum (the reference)"]
    assert "no peak known on the CPU: points only" in fig.axes[0].get_title()


def test_roofline_needs_both_hooks(tmp_path):
    pytest.importorskip("matplotlib")
    records = [gpu_record(1000, 1e-6) | {"flops": None}]
    with pytest.raises(UsageError, match="--roofline: no timed point of sum has both traffic and flops"):
        plot.roofline(records, "n", tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.slow
def test_bench_roofline_on_the_cpu(kplay, tmp_path):
    pytest.importorskip("matplotlib")
    result = kplay("bench", "sum", "--device", "cpu", "--sizes", "1e3,1e4", "--roofline", tmp_path / "r.png", "--json")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["flops"] for r in records] == [1000, 10_000] and [r["traffic"] for r in records] == [4000, 40_000]
    png_size(tmp_path / "r.png")


# ---- on the GPU box ------------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_gpu_run_reports_pct_of_the_device_peak(kplay):
    device.peaks.cache_clear()
    result = kplay("run", "sum", "--device", "cuda", "--variant", "fast", "--n", "1e8", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    clock, bus = getattr(props, "memory_clock_rate", None), getattr(props, "memory_bus_width", None)
    assert r["peak_gbps"] > 100 and r["bound"] == "memory" and r["traffic"] == 4 * 10**8
    if clock and bus:  # torch has the properties (2.14 does): the same arithmetic from them
        assert r["peak_gbps"] == pytest.approx(2 * clock * 1e3 * bus / 8 / 1e9)
    assert 0 < r["copy_gbps"] < r["peak_gbps"]  # the measured copy stays below the memory's peak
    for t in (r["variants"][0], r["baselines"]["torch.sum"]):
        assert 1 < t["pct_peak"] <= 100 and t["pct_peak"] == pytest.approx(100 * t["gbps"] / r["peak_gbps"])
    if "H200" in props.name:
        assert r["peak_gbps"] == pytest.approx(4800, rel=0.01) and r["peak_gflops"] == pytest.approx(67_000, rel=0.02)
    table = kplay("run", "sum", "--device", "cuda", "--variant", "fast", "--n", "1e8")
    assert table.exit_code == 0 and "% peak" in table.output and "% copy" not in table.output
    assert "memory ceiling: " in table.output and "a device-to-device copy measured here" in table.output


@pytest.mark.cuda
def test_gpu_linear_is_judged_against_the_compute_ceiling(kplay):
    result = kplay("run", "linear", "--device", "cuda", "--variant", "cuda-tiled", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["bound"] == "compute" and r["peak_gflops"] > 1000
    v = r["variants"][0]
    assert 1 < v["pct_peak"] <= 100 and v["pct_peak"] == pytest.approx(100 * v["gflops"] / r["peak_gflops"])


@pytest.mark.parametrize("flops_per_byte, bound, header", [
    (0.25, None, "GB/s"), (1.0, None, "GFLOP/s"),  # the CPU (no peak): one FLOP per byte decides
    (10.0, "memory", "GB/s"), (0.25, "compute", "GFLOP/s"),  # a GPU: the ceiling that binds decides
])
def test_the_rate_column_follows_the_ceiling_that_binds(flops_per_byte, bound, header):
    from playground.core.record import RunResult

    run = RunResult("sum", "cuda", "float32", 0, {"n": 1000}, {}, "2.11", traffic=4000, bound=bound,
                    flops=int(flops_per_byte * 4000))
    r = {**gpu_record(1000, 1e-6, bound=bound), "rate": run.to_dict()["rate"]}
    assert report.metric([r]) == ({"GB/s": "gbps", "GFLOP/s": "gflops"}[header], header)


def test_a_tf32_variant_is_held_to_the_tf32_ceiling_and_the_report_says_so():
    """In a float32 run, % peak of a variant with math = "tf32" is of the tensor cores' TF32 rate (half the
    bfloat16 one on Hopper), not the CUDA cores' float32 rate it would pass; a 16-bit run has no such row."""
    from playground.core.record import RunResult
    from playground.report.tables import _peak_notes
    from playground.run.runner import _roof, _tf32_roof

    p, flops, nbytes = h200(), 2 * 4096**3, 4 * 4 * 4096**2
    run = RunResult("linear", "cuda", "float32", 0, {}, {}, "2.11")
    assert _roof(run, p, nbytes, flops) == pytest.approx(flops / (p.flops("float32") * 1e9))
    assert _tf32_roof(run, p, nbytes, flops) == pytest.approx(flops / (p.flops("bfloat16") / 2 * 1e9))
    notes = [t.plain for t in _peak_notes({**run.__dict__, "flops": flops, "traffic": nbytes, "peak_gbps": p.bandwidth_gbps,
                                           "peak_gflops": p.flops("float32")})]
    assert notes[-1] == ("% peak of a TF32 variant: of the TF32 ceiling, 535,265 GFLOP/s = "
                         "132 SMs x 1,980 MHz x 1,024 FMA x 2 (tensor cores, dense)")
    assert _tf32_roof(RunResult("linear", "cuda", "bfloat16", 0, {}, {}, "2.11"), p, nbytes, flops) is None
