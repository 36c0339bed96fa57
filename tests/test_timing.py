"""Timing that no kernel can fool (fresh inputs, every call checked, every stream, noise, clocks)."""

import json
import re
import statistics
import time
from types import SimpleNamespace

import pytest
import torch

from playground.run import audit as trust
from playground.core.record import Stats, same
from playground.run.timing import bench


def stats(median, noise, **kw):
    return Stats(median, median, median, 30, "perf_counter", noise=noise, **kw)


def test_noise_is_the_relative_standard_deviation():
    samples = [1.0, 1.1, 0.9, 1.0, 1.2, 0.8]
    assert Stats.of(samples, "x").noise == pytest.approx(statistics.stdev(samples) / statistics.fmean(samples))
    interrupted = samples * 10 + [30.0, 50.0]  # two samples the OS stole: far outliers, not spread
    assert Stats.of(interrupted, "x").noise == pytest.approx(Stats.of(samples * 10, "x").noise)


def test_two_medians_within_the_larger_noise_are_the_same():
    assert same(stats(1.00, 0.03), stats(1.02, 0.01))
    assert not same(stats(1.00, 0.01), stats(1.05, 0.02))
    assert not same(stats(1.0, 0.0), stats(1.0000001, 0.0))


def test_forward_plus_backward_adds_medians_and_keeps_both_steps_sm_clocks():
    """A call's time (forward + backward) sums the steps' medians and keeps the SM clock over all their
    samples: the report's 'SM clock' line and the pool's table read it."""
    from playground.core.record import total

    fw = Stats(1e-4, 9e-5, 1.1e-4, 40, "m", noise=0.02, clock_mhz=(1900, 1980, 1980))
    bw = Stats(3e-4, 2.8e-4, 3.2e-4, 30, "m", noise=0.04, clock_mhz=(1755, 1965, 1980))
    both = total({"forward": fw, "backward": bw})
    assert both.median_s == pytest.approx(4e-4) and both.samples == 30
    assert both.clock_mhz == (1755, 1980, 1980)
    assert total({"forward": fw, "backward": Stats(3e-4, 2.8e-4, 3.2e-4, 30, "m")}).clock_mhz == (1900, 1980, 1980)
    assert total({"forward": Stats(1e-4, 1e-4, 1e-4, 3, "m"), "backward": Stats(1e-4, 1e-4, 1e-4, 3, "m")}).clock_mhz is None


def test_a_quiet_contender_stops_sampling_early():
    """Noise under the target ends sampling long before the budget (the edit loop gets faster)."""
    quiet = bench({"a": lambda: None}, "cpu", budget_s=60.0, noise_target=10.0)
    assert quiet["a"].samples < 100


def test_rotation_gives_consecutive_calls_different_inputs_and_observe_sees_every_call():
    seen, observed = [], []
    fns = {"f": [(lambda k=k: (k,), lambda k: seen.append(k) or k) for k in range(3)]}
    out = bench(fns, "cpu", budget_s=0.0, observe=lambda name, k, o: observed.append((k, o)))
    timed = seen[3:]  # after the warm-up: three calls, on the inputs in turn
    assert len(timed) == out["f"].samples and all(a != b for a, b in zip(timed, timed[1:]))
    assert observed == [(k, k) for k in timed]


@pytest.mark.parametrize("contenders", [2, 3, 6])
def test_the_calls_take_the_inputs_in_turn_whoever_makes_them(contenders):
    """No call finds its input just read by the contender before it (it would be in the cache), and no
    contender times the same input twice in a row, whether or not 3 divides the number of contenders."""
    calls = []
    fns = {c: [(lambda k=k: (k,), lambda k, c=c: calls.append((c, k))) for k in range(3)] for c in range(contenders)}
    bench(fns, "cpu", budget_s=0.0)
    timed = calls[9 * contenders:]
    assert all(a[1] != b[1] for a, b in zip(timed, timed[1:]))
    for c in range(contenders):
        mine = [k for who, k in timed if who == c]
        assert all(a != b for a, b in zip(mine, mine[1:]))


def test_a_timed_call_that_returns_a_kept_answer_fails():
    """A result kept from an earlier call, by nothing, by the input's pointer or by a sample of its values, is
    caught in the timing loop: the copies' contents change at new places before every timed call."""
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    kept = {}

    def stale(x):  # the answer of the call before
        answer, kept["x"] = kept.get("x", x.clone()).sum(), x.clone()
        return answer

    def by_pointer(x):
        return kept.setdefault(x.data_ptr(), x.sum())

    def by_sample(x):
        return kept.setdefault((x.data_ptr(), x[500].item(), x[333].item()), x.sum())

    spec = SimpleNamespace(outputs=(), reference=lambda x: x.double().sum(), tolerance=lambda x, dtype: (1e-3, ""),
                           update=None)
    for fn, fails in ((stale, True), (by_pointer, True), (by_sample, True), (lambda x: x.sum(), False)):
        pool, _ = [(x.clone(),) for _ in range(3)], kept.clear()
        outputs = trust.TimedOutputs(spec, pool, torch.float32, 0)
        bench({("variant", "v", "call"): [(lambda p=p: p, fn) for p in pool]}, "cpu", budget_s=0.0,
              observe=outputs.observe, before=outputs.change)
        found = outputs.findings("v", {"call": None})
        assert bool(found) == fails and all("timed input" in f and f.startswith("timing:") for f in found)


def test_a_long_wait_after_the_end_event_means_unseen_work():
    honest = {"call": stats(100e-6, 0.01, tail_s=14e-6, tail_floor_s=12e-6)}
    fooled = {"call": stats(5e-6, 0.01, tail_s=95e-6, tail_floor_s=12e-6)}
    assert trust.unseen_work(honest) == []
    assert "another stream" in trust.unseen_work(fooled)[0]
    assert trust.unseen_work({"call": stats(5e-6, 0.01)}) == []  # CPU: no events, nothing to compare


def test_a_run_times_several_inputs_and_says_so(kplay):
    result = kplay("run", "sum", "--device", "cpu", "--n", "1e4", "--json")
    record = json.loads(result.stdout)
    assert result.exit_code == 0 and record["inputs_timed"] >= 3
    assert record["variants"][0]["time"]["noise"] > 0
    text = kplay("run", "sum", "--device", "cpu", "--n", "1e4").output
    assert f"on {record['inputs_timed']} copies changed before each call" in " ".join(text.split()) and "±: noise" in text


# ---- on a GPU ---------------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_work_left_on_a_side_stream_is_seen_by_the_device_wide_sync():
    x = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def sneaky():  # the answer on PyTorch's stream, the real work on another nobody waits for
        with torch.cuda.stream(side):
            for _ in range(20):
                x @ x
        return x[0, 0]

    timed = bench({"f": sneaky, "honest": lambda: x @ x}, "cuda", budget_s=0.2)
    assert trust.unseen_work({"call": timed["f"]}) and not trust.unseen_work({"call": timed["honest"]})


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("family, args", [("sum", ["--n", "1e6"]), ("sum", ["--n", "1e8"]), ("lltm", []),
                                          ("linear", [])])
def test_every_correct_cuda_variant_passes_the_timing_guards(kplay, family, args):
    result = kplay("run", family, "--device", "cuda", "--variant", "all", *args, "--json")
    record = json.loads(result.stdout)
    assert result.exit_code == 0, [v["check"]["mismatches"] for v in record["variants"]]
    assert record["inputs_timed"] >= 2


@pytest.mark.cuda
def test_a_slow_host_path_stays_out_of_the_events():
    """A call that spends 200 µs on the host before its kernel times as the kernel alone: the GPU spins
    behind the flush until the call is queued (at n=1e7 the flush alone covered 30 µs of host time)."""
    x = torch.randn(10**7, device="cuda")

    def slow():
        until = time.perf_counter() + 200e-6
        while time.perf_counter() < until:
            pass
        return torch.sum(x)

    stats = bench({"plain": lambda: torch.sum(x), "slow": slow}, "cuda", budget_s=0.3)
    assert stats["slow"].median_s < 1.05 * stats["plain"].median_s, stats
    spin = re.search(r"queued behind a (\d+) µs GPU spin", stats["plain"].method)
    assert spin and int(spin[1]) >= 800, stats["plain"].method  # four times the slowest host path


@pytest.mark.cuda
def test_the_kernels_line_leaves_no_profiler_overhead_behind():
    """The run's closing profiler pass (resources.trace_each) must not slow the launches after it in the same
    process (a Python-API loop, a notebook): CUPTI is torn down once the pass ends."""
    from playground.compiler import kernel_resources as resources
    x = torch.randn(10**4, device="cuda")
    before = bench({"sum": lambda: torch.sum(x)}, "cuda", budget_s=0.2)["sum"].median_s
    resources.trace_each([lambda: torch.sum(x)])
    after = bench({"sum": lambda: torch.sum(x)}, "cuda", budget_s=0.2)["sum"].median_s
    assert after < 1.2 * before + 0.5e-6, (before, after)


def test_a_rate_above_the_gpus_ceilings_is_a_timing_failure():
    """The guard against an H200's figures: 4,814 GB/s; 66,908 GFLOP/s float32 on the CUDA cores, 8x that on
    the tensor cores (TF32). An honest rate passes; one above either ceiling fails and says which."""
    from playground.run import peaks as device

    h200 = device.Peaks("NVIDIA H200", 4814.0, {"float32": 66908.0})
    rate = lambda gbps, gflops: SimpleNamespace(gbps=gbps, gflops=gflops)
    assert trust.impossible(rate(4500.0, 400_000.0), h200, 9, "float32") == []  # Hopper: a TF32 matmul may do this
    assert trust.impossible(rate(9000.0, None), None, None, "float32") == []  # a CPU's cache can beat its memory
    (memory,) = trust.impossible(rate(11_000.0, None), h200, 9, "float32")
    assert memory.startswith("timing: 11,000 GB/s is above this GPU's peak of 4,814 GB/s")
    (compute,) = trust.impossible(rate(None, 600_000.0), h200, 9, "float32")
    assert "600,000 GFLOP/s is above this GPU's float32 ceiling of 535,264 GFLOP/s" in compute
    # Blackwell: its tensor cores' ratio is not known here
    assert trust.impossible(rate(None, 600_000.0), h200, 10, "float32") == []


def test_on_volta_and_turing_a_float32_rate_above_the_cuda_cores_fails():
    """Their tensor cores take half types only: a float32 rate above the CUDA cores' peak is no kernel's."""
    from playground.run import peaks as device

    v100 = device.Peaks("Tesla V100", 900.0, {"float32": 15_700.0})
    (compute,) = trust.impossible(SimpleNamespace(gbps=None, gflops=20_000.0), v100, 7, "float32")
    assert "ceiling of 15,700 GFLOP/s" in compute
