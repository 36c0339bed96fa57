"""cuda-graph against cuda-fast, one contender at a time: the graph counts after each step, and a profiled
timeline of one backward round at (1024, 512, 1024) (the timing's round: a fresh forward, untimed, then
(new_h.sum() + new_cell.sum()).backward()). The profiler inflates the host's times; the GPU's kernels and
the order of things are what to read.

    python3 benchmarks/lltm_graph_timeline.py > lltm-graph-timeline.txt
"""
import sys, warnings, time
sys.path.insert(0, "benchmarks")
warnings.simplefilter("always")
import torch
import lltm_bench as lb
from playground.build import build
from playground import timing
ops, _ = build(lb.FAMILY, lb.FAMILY.variants["cuda-graph"], lb.FAMILY.parse_params([]))
fn = lb.SPEC.lltm_function(ops, "cuda-graph")
fast_ops, _ = build(lb.FAMILY, lb.FAMILY.variants[lb.FAST], lb.FAMILY.parse_params([]))
fast = lb.SPEC.lltm_function(fast_ops, lb.FAST)
c = lambda: list(ops.graph_counts())
for size in lb.SIZES["cuda"]:
    inputs = lb.inputs_for(size, "cuda")
    print(size, "start", c())
    print("check", lb.check(fn, inputs)["ok"], c())
    steps = lb.SPEC.timings(fn, inputs)
    fsteps = lb.SPEC.timings(fast, inputs)
    for name in ("forward", "backward"):
        for label, st in (("graph", steps), ("fast", fsteps)):
            s = timing.bench({name: st[name]}, "cuda", 0.5, wall=True, warm=True)[name]
            print(label, name, f"{s.median_s*1e6:.1f} us", c())
    # raw loop: backward pattern, timed per call
    prep, run = steps["backward"]
    ts = []
    for i in range(30):
        a = prep(); torch.cuda.synchronize(); t = time.perf_counter(); run(*a); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
    ts.sort(); print("raw bwd loop median", ts[15]*1e6, c())

# timeline of one warm backward round at the large size, cuda-fast and cuda-graph
from torch.profiler import profile, ProfilerActivity
inputs = lb.inputs_for(lb.SIZES["cuda"][1], "cuda")
for label, f in (("fast", fast), ("graph", fn)):
    prep, run = lb.SPEC.timings(f, inputs)["backward"]
    for _ in range(5):
        a = prep(); run(*a)
    a = prep(); run(*a); a = prep(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter(); run(*a); torch.cuda.synchronize(); wall = time.perf_counter() - t
    evs = sorted(prof.events(), key=lambda e: e.time_range.start)
    t0 = evs[0].time_range.start
    print(f"--- {label} backward round, wall {wall*1e6:.0f} us (profiled)")
    for e in evs:
        gpu = e.device_type == torch.autograd.DeviceType.CUDA
        if gpu or e.cpu_parent is None or "cuda" in e.name.lower() and "Launch" in e.name:
            print(f"{'GPU' if gpu else 'CPU'} {e.time_range.start - t0:8.1f} +{e.time_range.elapsed_us():7.1f}  {e.name[:70]}")
    print(c())
