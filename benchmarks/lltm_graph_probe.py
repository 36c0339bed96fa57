"""Before a CUDA-graph rung of lltm: how near do graphs bring cuda-fast to 1.5x eager, forward and backward?

    python3 benchmarks/lltm_graph_probe.py [--out DIR] [--runs 3]

At (16, 32, 128) and (1024, 512, 1024), float32, each contender timed as lltm_bench.py times them (the
forward on leaves that require grad; the backward as (new_h.sum() + new_cell.sum()).backward() on a fresh
forward; the synchronized wall clock per call, each call after an untimed one of its own): eager Python,
cuda-fast, and both through torch.cuda.make_graphed_callables, whose forward and backward are each one
graph replay after the inputs are copied into its static buffers. A graphed callable returns the same
output buffers every call (the next call overwrites them), so "+ clone" also copies the outputs out, as
an op that returns fresh tensors must. The floor a graph rung can reach is the graphed rows; whether 1.5x
eager is within it, the ratios say. Last, the rung itself: cuda-graph, a graph per call signature in C++; and
the floor: the wall clock of a null cell (cuda-fast's op and autograd, no work) plus the GPU time of each
contender's kernels beyond the null cell's, against the time 1.5x eager leaves.
Checked against the float64 reference first (lltm_bench.check).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import lltm_bench as lb  # noqa: E402
from playground.compiler.build import build  # noqa: E402

TARGET = 1.5


def graphed(fn, inputs, clone: bool):
    """fn through make_graphed_callables on leaves shaped like inputs; optionally copying its outputs out."""
    sample = tuple(x.detach().clone().requires_grad_() for x in inputs[:5])
    g = torch.cuda.make_graphed_callables(fn, sample)
    if not clone:
        return g
    return lambda *args: tuple(y.clone() for y in g(*args))


def contenders(fast) -> dict:
    return {"eager": lb.SPEC.lltm_reference, "cuda-fast": fast}


def kernel_us(steps, n: int = 20) -> float:
    """GPU time of the kernels each round of `steps` (callables, run in order, then a sync) launches: the
    sum over torch.profiler's CUDA kernel events, per round."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        [f() for f in steps]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            [f() for f in steps]
            torch.cuda.synchronize()
    kinds = (torch.autograd.DeviceType.CUDA,)
    return sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type in kinds) / n


def gpu_work(fn, inputs) -> tuple[float, float]:
    """(forward, backward) GPU kernel time per call, timed as the table's calls are: the backward's is its
    round (a fresh forward, then the backward) less the fresh forward alone."""
    steps = lb.SPEC.timings(fn, inputs)
    (leaves, forward), (fresh, backward) = steps["forward"], steps["backward"]
    held = []
    fw = kernel_us([lambda: forward(*leaves())])
    alone = kernel_us([lambda: held.append(fresh()), held.clear])
    both = kernel_us([lambda: backward(*fresh())])
    return fw, both - alone


def null_cell():
    """The cell with no work (lltm_null.cpp): cuda-fast's op and C++ autograd, its forward and backward only
    allocating their outputs. Timed as the cell is, it is what a call pays besides the cell's own kernels: the
    Python call, autograd's engine with the same nodes (the timing's sums, the cell's backward, five gradients
    accumulated), the allocations, the sync."""
    from torch.utils.cpp_extension import load

    here = Path(__file__).resolve().parent
    load(name="kplay_null_lltm", sources=[str(here / "lltm_null.cpp")], is_python_module=False,
         extra_include_paths=[str(here.parent / "snippets" / "lltm")],
         extra_cflags=["-O2", "-std=c++20", "-DKPLAY_NS=kplay_null"])
    return torch.ops.kplay_null.lltm.default


NULL = "null cell"


def floor_lines(size, times: dict, works: dict) -> list[str]:
    """The fastest a synchronized call of each contender can be, the null cell's wall clock plus the GPU time of
    the contender's kernels beyond the null cell's (the timing's own sums), against the time 1.5x eager allows."""
    lines = []
    for k, steps in works.items():
        if k == NULL:
            continue
        for i, step in enumerate(("forward", "backward")):
            eager, fixed, now = (times[(c, step)]["wall"] for c in ("eager", NULL, k))
            own = steps[i] - works[NULL][i]
            floor, need = own + fixed, eager / TARGET
            lines.append(f"| {size} | {k} | {step} | {own:.1f} | {fixed:.1f} | {floor:.1f} | {eager / floor:.2f} | "
                         f"{eager / now:.2f} | {need:.1f} | {'fits' if floor <= need else 'NO'} |")
    return lines


def median_of_runs(runs: list[dict]) -> dict:
    """{key: {clock: µs}}, each the median of the runs' medians."""
    return {k: {c: statistics.median(run[k][c] for run in runs) for c in runs[0][k]} for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--runs", type=int, default=3, help="timing runs; each figure is the median of their medians")
    args = ap.parse_args()
    ops, _ = build(lb.FAMILY, lb.FAMILY.variants[lb.FAST], lb.FAMILY.parse_params([]))
    fast = lb.SPEC.lltm_function(ops, lb.FAST)
    graph_ops, _ = build(lb.FAMILY, lb.FAMILY.variants["cuda-graph"], lb.FAMILY.parse_params([]))
    graph_rung = lb.SPEC.lltm_function(graph_ops, "cuda-graph")  # the rung: a graph per call signature, in C++
    null = null_cell()
    lines, record = ["| size | contender | check | forward µs | x eager | backward µs | x eager |", "|---|---|---|---|---|---|---|"], []
    floors = ["| size | contender | step | its GPU kernels µs | null cell µs | floor µs | best x eager | now x eager | "
              "1.5x eager needs ≤ µs | fits |", "|---|---|---|---|---|---|---|---|---|---|"]
    for size in lb.SIZES["cuda"]:
        inputs = lb.inputs_for(size, "cuda")
        fns = {**contenders(fast), **{f"{k} graphed{' + clone' * c}": graphed(f, inputs, c)
                                      for k, f in contenders(fast).items() for c in (False, True)},
               "cuda-graph": graph_rung}
        checks = {k: lb.check(f, inputs) for k, f in fns.items()}
        pairs = {(k, step): pair for k, f in fns.items() for step, pair in lb.SPEC.timings(f, inputs).items()}
        pairs.update({(NULL, step): pair for step, pair in lb.SPEC.timings(null, inputs).items()})
        times = median_of_runs([lb.time_all(pairs, "cuda", args.budget) for _ in range(args.runs)])
        eager = {step: times[("eager", step)]["wall"] for step in ("forward", "backward")}
        for k in fns:
            fw, bw = times[(k, "forward")]["wall"], times[(k, "backward")]["wall"]
            lines.append(f"| {size} | {k} | {'pass' if checks[k]['ok'] else 'FAIL'} | {fw:.1f} | {eager['forward'] / fw:.2f} | "
                         f"{bw:.1f} | {eager['backward'] / bw:.2f} |")
            record.append({"size": size, "contender": k, **checks[k], "forward_us": fw, "backward_us": bw})
        null_us = [times[(NULL, step)]["wall"] for step in ("forward", "backward")]
        lines.append(f"| {size} | {NULL} (no work) | - | {null_us[0]:.1f} | | {null_us[1]:.1f} | |")
        record.append({"size": size, "contender": NULL, "forward_us": null_us[0], "backward_us": null_us[1]})
        works = {k: gpu_work(fns[k], inputs) for k in ("eager", "cuda-fast", "cuda-graph")}
        works[NULL] = gpu_work(null, inputs)
        floors += floor_lines(size, times, works)
    counts = dict(zip([f"{step} {what}" for step in ("forward", "backward") for what in ("replays", "records", "direct")],
                      graph_ops.graph_counts()))
    text = "\n".join([f"# lltm: CUDA graphs against the {TARGET}x target, {torch.cuda.get_device_name()}", "",
                      f"synchronized wall clock per call, each call after an untimed one of its own; the median of "
                      f"{args.runs} runs' medians", "", *lines,
                      "", f"cuda-graph over the whole run (checks, warm-ups, timing): {counts}", "",
                      "The floor: the wall clock of a null cell, timed in the same loop (lltm_null.cpp: cuda-fast's",
                      "op and C++ autograd, allocating its outputs and computing nothing: the call, autograd's engine",
                      "with the same nodes, the timing's sums, the sync), plus the GPU time of the contender's own",
                      "kernels per call (torch.profiler, less the null cell's). Only the host's work after the cell's",
                      "kernels are launched can hide behind them, so no synchronized call of that contender is much",
                      "faster. 'best x eager' is eager's wall clock over that floor, 'now' over the contender's own;",
                      "where the floor is above what 1.5x eager allows (eager / 1.5), no host saving reaches 1.5x.",
                      "", *floors])
    print(text)
    if args.out:
        (args.out / "lltm-graph-probe.md").write_text(text + "\n")
        (args.out / "lltm-graph-probe.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
