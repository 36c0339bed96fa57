"""cuda-graph against cuda-fast, one contender at a time: the graph counts after each step, and a profiled
timeline of one backward round at (1024, 512, 1024) (the timing's round: a fresh forward, untimed, then
(new_h.sum() + new_cell.sum()).backward()). The profiler inflates the host's times; the GPU's kernels and
the order of things are what to read.

    python3 benchmarks/lltm_graph_timeline.py > lltm-graph-timeline.txt
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import lltm_bench as lb  # noqa: E402
from playground.run import timing  # noqa: E402
from playground.compiler.build import build  # noqa: E402


def cell(variant: str):
    ops, _ = build(lb.FAMILY, lb.FAMILY.variants[variant], lb.FAMILY.parse_params([]))
    return ops, lb.SPEC.lltm_function(ops, variant)


def timeline(fn, inputs) -> list[str]:
    """Each GPU activity of one warm backward round, its start (µs from the round's first event) and length."""
    prepare, run = lb.SPEC.timings(fn, inputs)["backward"]
    for _ in range(6):
        run(*prepare())
    args = prepare()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        run(*args)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    t0 = events[0].time_range.start
    lines = [f"wall {wall * 1e6:.0f} µs (profiled)"]
    lines += [f"GPU {e.time_range.start - t0:8.1f} +{e.time_range.elapsed_us():7.1f}  {e.name[:70]}"
              for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    return lines


def main() -> None:
    graph_ops, graph = cell("cuda-graph")
    _, fast = cell(lb.FAST)
    for size in lb.SIZES["cuda"]:
        inputs = lb.inputs_for(size, "cuda")
        print(size, "checked:", lb.check(graph, inputs)["ok"], "counts:", list(graph_ops.graph_counts()))
        for step in ("forward", "backward"):
            for label, fn in (("cuda-graph", graph), ("cuda-fast", fast)):
                pair = lb.SPEC.timings(fn, inputs)[step]
                t = timing.bench({step: pair}, "cuda", 0.5, wall=True, warm=True)[step]
                print(f"{label} {step} {t.median_s * 1e6:.1f} µs, counts {list(graph_ops.graph_counts())}")
    inputs = lb.inputs_for(lb.SIZES["cuda"][1], "cuda")
    for label, fn in (("cuda-fast", fast), ("cuda-graph", graph)):
        print(f"--- {label} backward round,", "\n".join(timeline(fn, inputs)))
    print("counts:", list(graph_ops.graph_counts()))


if __name__ == "__main__":
    main()
