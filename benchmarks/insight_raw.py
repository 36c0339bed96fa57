"""Raw output of the GPU box's profilers for kplay's parsers: one call profiled at the requested size.

    python3 benchmarks/insight_raw.py OUTDIR          # torch.profiler records + chrome traces
    ncu --nvtx --nvtx-include "kplay/" ... python3 benchmarks/insight_raw.py OUTDIR --ncu
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import playground  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
n = 10**8
x = torch.randn(n, device="cuda")
calls = {"torch.sum": lambda: torch.sum(x)}
for variant in ("tree", "fast"):
    ops = playground.load("sum", variant, device="cuda")
    calls[variant] = lambda ops=ops: ops.sum(x)
for label, call in calls.items():
    call(); torch.cuda.synchronize()  # warm: the build and the first launch are not what we profile
    if "--ncu" in sys.argv:
        torch.cuda.nvtx.range_push("kplay")
        call()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        continue
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call(); torch.cuda.synchronize()
    prof.export_chrome_trace(str(out / f"trace-{label}.json"))
    kernels = [e for e in json.load(open(out / f"trace-{label}.json"))["traceEvents"] if e.get("cat") == "kernel"]
    print(label, json.dumps(kernels, indent=1))
p = torch.cuda.get_device_properties(0)
print({k: getattr(p, k) for k in dir(p) if not k.startswith("_")})
