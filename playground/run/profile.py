"""A profiled call, in the child: one call of each contender after a warm-up, and the GPU work it launched.

insight/profile.py starts it (`kplay profile`), under ncu where it can, and reads what it sends back.
"""

from __future__ import annotations

from ..compiler import kernel_resources as resources
from ..core import events, names
from ..core.errors import UsageError
from ..family import spec as specs
from . import runner

GPU_WORK = dict(zip(resources.GPU_WORK, ("kernel", "memset", "memcpy")))  # a trace category -> the kind shown


def peak_gbps() -> float | None:
    """The device's memory bandwidth: 2 (double data rate) x memory clock x bus width / 8 (device.py)."""
    from .peaks import peaks

    peak = peaks("cuda")
    return peak.bandwidth_gbps if peak else None


def execute(req, on_event=events.ignore) -> "Profiled":
    """Build, warm up, then profile one call of each chosen variant and of the first baseline."""
    import torch


    if not torch.cuda.is_available():  # asked here, not in kplay's process: `import torch` there costs seconds
        raise UsageError("kplay profile: no CUDA GPU is visible here")
    fam = req.load_family()
    spec = specs.load(fam)
    built = runner.build_all(fam, runner.runnable(fam, "cuda", req)[0], req.params, on_event)
    dtype = getattr(torch, req.dtype)
    inputs = runner.make_inputs(spec, req.sizes, dtype, "cuda", req.seed)
    calls = [("variant", v, spec.function(ops, v)) for v, (ops, _) in built.items()]
    calls += [("baseline", b, fn) for b, fn in runner.chosen_baselines(spec, req).items()]
    on_event(events.PHASE, phase="profile")
    steps = [(kind, name, spec.timings(fn, inputs)) for kind, name, fn in calls]
    for _, _, each in steps:
        _warm(each)
    labelled = [(i, label, step) for i, (_, _, each) in enumerate(steps) for label, step in each.items()]
    work = _calls([step for _, _, step in labelled], req.mode == "nvtx")
    profiled = [{"kind": kind, "name": name, "kernels": []} for kind, name, _ in steps]
    for (i, label, _), records in zip(labelled, work):
        profiled[i]["kernels"] += [dict(k, step=label) for k in records]
    nbytes = spec.traffic(req.sizes, dtype) if spec.traffic else None
    calls = {"calls": [[i, label] for i, label, _ in labelled]} if req.mode == "nvtx" else {}  # ncu's, in order
    return Profiled({"family": fam.name, "device": torch.cuda.get_device_name(), "dtype": req.dtype,
                     "sizes": {k: v for k, v in req.sizes.items() if k in fam.sizes}, "params": req.params,
                     "nbytes": nbytes, "peak_gbps": peak_gbps(), "contenders": profiled} | calls)


class Profiled:
    """The child's record; the child sends to_dict()."""

    def __init__(self, data: dict):
        self.data = data

    def to_dict(self) -> dict:
        return self.data


def _warm(steps: dict) -> None:
    """Twice each step: the first launch loads the module and allocates; neither is what we profile."""
    import torch

    for prepare, run in steps.values():
        for _ in range(2):
            run(*prepare())
    torch.cuda.synchronize()


def _calls(steps: list, nvtx: bool) -> list[list[dict]]:
    """The GPU work of one call of each step, from one torch.profiler pass; under ncu, each call in the
    NVTX range after a spin kernel, which marks where its kernels begin in ncu's log (and no records here)."""
    import torch

    calls = [(run, prepare()) for prepare, run in steps]
    torch.cuda.synchronize()
    if not nvtx:
        return [gpu_work(e) for e in resources.trace_each([lambda run=run, args=args: run(*args) for run, args in calls])]
    for run, args in calls:
        torch.cuda.nvtx.range_push(events.NVTX_RANGE)
        torch.cuda._sleep(1000)
        run(*args)
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    return [[] for _ in calls]


def gpu_work(work: list[dict]) -> list[dict]:
    """The kernels, memsets and copies among a chrome trace's events, in launch order, with what launched them."""
    rows = []
    for e in sorted((e for e in work if e.get("cat") in GPU_WORK), key=lambda e: e["ts"]):
        a = e.get("args", {})
        kind = GPU_WORK[e["cat"]]
        rows.append({"kind": kind, "name": e["name"], "short": names.short_name(e["name"], names.WIDTH) if kind == "kernel" else kind,
                     "us": float(e.get("dur", 0.0)), "grid": a.get("grid"), "block": a.get("block"),
                     "registers": a.get("registers per thread"), "shared_bytes": a.get("shared memory"),
                     "occupancy_pct": a.get("est. achieved occupancy %")})
    return rows
