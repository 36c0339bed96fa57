"""Why kplay read 0.3-1.2 us under nvbench's cold median on the sum rungs that launch a memset and
then their kernels (fast, first-add, shuffle), and not on torch.sum or tree. One process, one
input per size; each contender is timed

- by nvbench (cold), with its blocking kernel on and off;
- by kplay's timer (playground.run.timing.bench) on PyTorch's default stream, on a stream of its own (nvbench
  launches on a created stream), and with a 1x L2 flush instead of kplay's 2x;

and one call of each is traced (torch.profiler) on both streams: its kernels, their sum, and the gaps
between them on the GPU.

    python3 benchmarks/nvbench_gap.py [--out FILE]      # on a GPU machine with cuda-bench
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common
from common import emit, nvbench_run  # first: it puts the repository on sys.path

import playground  # noqa: E402
from playground.run import timing  # noqa: E402

SIZES = [10**4, 10**6, 10**7]
RUNGS = ["tree", "first-add", "shuffle", "fast"]


def nvbench(calls: dict, inputs: dict, keep: Path) -> dict:
    """{(blocking, name, n): (median, min, noise)} of nvbench's cold GPU time, its blocking kernel on and off."""
    import cuda.bench as bench

    def register(blocking: bool):
        def one(state):
            x, call = inputs[state.get_int64("n")], calls[state.get_string("contender")]
            state.set_disable_blocking_kernel(not blocking)

            def launcher(launch):
                with torch.cuda.stream(torch.cuda.ExternalStream(launch.get_stream().addressof())):
                    call(x)

            state.exec(launcher)

        b = bench.register(one)
        b.set_name(f"blocking-{blocking}")
        b.add_int64_axis("n", SIZES)
        b.add_string_axis("contender", list(calls))
        b.set_timeout(2.0)

    register(True)
    register(False)
    found = {}
    for bench_name, axes, s in nvbench_run(keep):
        pick = lambda end: next((float(v) for t, v in s.items() if t.startswith("nv/cold/time/gpu") and  # noqa: E731
                                 t.endswith(end) and v is not None), float("nan"))
        found[(bench_name == "blocking-True", axes["contender"], int(axes["n"]))] = (
            pick("median"), pick("min"), pick("relative"))
    return found


def kplay(calls: dict, inputs: dict, stream=None, flush_l2: int = 2) -> dict:
    """{(name, n): median} from kplay's timer, optionally on another stream or with another flush size."""
    holder = timing._holder
    if flush_l2 != 2:
        def one_x(host_s, clock):
            flush = holder(host_s, clock)
            l2 = torch.cuda.get_device_properties(0).L2_cache_size
            junk, cycles = torch.empty(flush_l2 * l2, dtype=torch.uint8, device="cuda"), int(flush.hold_s * 2e9)

            def again():
                junk.zero_()
                torch.cuda._sleep(cycles)
            again.hold_s = flush.hold_s
            return again
        timing._holder = one_x
    found = {}
    try:
        with torch.cuda.stream(stream or torch.cuda.current_stream()):
            for n, x in inputs.items():
                stats = timing.bench({k: (lambda c=c, x=x: c(x)) for k, c in calls.items()}, "cuda", budget_s=0.5)
                found |= {(k, n): (s.median_s, s.noise) for k, s in stats.items()}
    finally:
        timing._holder = holder
    return found


def traced(calls: dict, inputs: dict, stream=None) -> dict:
    """{(name, n): (kernels, sum of their GPU times, span from first start to last end)} of one call."""
    from torch.profiler import ProfilerActivity, profile

    found = {}
    with torch.cuda.stream(stream or torch.cuda.current_stream()):
        for n, x in inputs.items():
            for k, call in calls.items():
                call(x)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    call(x)
                    torch.cuda.synchronize()
                ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
                spans = sorted((e.time_range.start, e.time_range.end) for e in ev)
                found[(k, n)] = (len(ev), sum(b - a for a, b in spans) / 1e6,
                                 (spans[-1][1] - spans[0][0]) / 1e6 if spans else 0.0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    keep = Path(tempfile.mkdtemp())
    calls = {"torch.sum": torch.sum} | {v: playground.load("sum", v, device="cuda").sum for v in RUNGS}
    inputs = {n: torch.randn(n, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) for n in SIZES}
    side = torch.cuda.Stream()
    cols = {"kplay": kplay(calls, inputs), "kplay, own stream": kplay(calls, inputs, side),
            "kplay, 1x L2 flush": kplay(calls, inputs, flush_l2=1)}
    nv = nvbench(calls, inputs, keep / "nvbench.json")
    tr, tr_side = traced(calls, inputs), traced(calls, inputs, side)
    us = lambda s: f"{s * 1e6:,.2f}"  # noqa: E731
    lines = ["# sum: the gap between kplay and nvbench, taken apart (one process)", "",
             f"{torch.cuda.get_device_name()}, torch {torch.__version__}. Medians in µs; noise is nvbench's "
             "relative stdev; the trace is one call's kernels (count, their summed time, first start to last end).", "",
             "| contender | n | kplay | own stream | 1x flush | nvbench | nv min | nv noise | nv, no blocking | "
             "trace default | trace own stream |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (k, n) in sorted(cols["kplay"], key=lambda t: (t[0], t[1])):
        on, off = (nv.get((b, k, n), (float("nan"),) * 3) for b in (True, False))
        t1, t2 = tr[(k, n)], tr_side[(k, n)]
        lines.append(f"| {k} | {n:.0e} | {us(cols['kplay'][(k, n)][0])} | {us(cols['kplay, own stream'][(k, n)][0])} | "
                     f"{us(cols['kplay, 1x L2 flush'][(k, n)][0])} | {us(on[0])} | {us(on[1])} | {on[2] * 100:.1f}% | "
                     f"{us(off[0])} | {t1[0]}: {us(t1[1])} / {us(t1[2])} | {t2[0]}: {us(t2[1])} / {us(t2[2])} |")
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
