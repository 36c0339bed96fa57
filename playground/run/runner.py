"""One run: request -> spec -> build -> inputs -> check -> time -> RunResult. Its steps are public for
`profile` and `sanitize`, which run the same build, inputs and baselines."""

from __future__ import annotations

import dataclasses
import time

from ..compiler import kernel_resources as resources
from ..compiler import remarks
from ..compiler.build import build, other_arch
from ..compiler.toolchain import folder
from ..core import events
from ..core.errors import KernelCrash, UsageError
from ..core.record import BaselineResult, RunResult, VariantResult
from ..family import render
from ..family import request as requests
from ..family import spec as specs
from . import audit as trust
from . import contention as neighbours
from . import lock as lease
from . import timing
from .check import check_variant, first_line, main_distribution, make_inputs
from .timing import as_pair


def resolve_device(device: str, fam=None, variant: str | None = None) -> str:
    """auto: cuda when a GPU is there and the run has a variant for it (a CPU-only family runs on the CPU)."""
    import torch

    if device == "auto":
        on_cuda = fam is None or any(v.name == variant or variant in (None, "all") for v in fam.variants_for("cuda"))
        return "cuda" if torch.cuda.is_available() and on_cuda else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is visible here (torch.cuda.is_available() is False); use --device cpu")
    return device


def chosen_baselines(spec: specs.Spec, req: requests.Request) -> dict:
    """The baselines this run times, {name: fn}: --baseline picks, --skip-baseline drops (names checked in request)."""
    names = req.baselines or [n for n in spec.baselines if n not in req.skip_baselines][:1 if req.one_baseline else None]
    return {n: spec.baselines[n] for n in names}


def runnable(fam, device: str, req: requests.Request) -> tuple[list, list[str]]:
    """The variants the run takes, and a warning for each of 'all' built for another GPU's arch alone (a named
    one is refused in one line, at its build)."""
    chosen = fam.pick_variants(device, req.variant, req.dtype)
    if req.variant != "all":
        return chosen, []
    away = {v.name: here for v in chosen if (here := other_arch(v))}
    skipped = [f"{name}: not run, built for sm_{fam.variants[name].arch.replace('.', '')} alone (this GPU is {here})"
               for name, here in away.items()]
    return [v for v in chosen if v.name not in away] or chosen, skipped  # none left: the build's one line says why


def other_dtypes(fam, device: str, req: requests.Request) -> list[str]:
    """--variant all with no --dtype: the own first dtypes of the device's variants that lack this run's, each
    a run of its own after this one (linear: the float32 ladder, then the bfloat16 tensor-core steps)."""
    if not req.own_dtypes:
        return []
    firsts = [fam.dtypes_of(v)[0] for v in fam.variants_for(device)
              if req.dtype not in fam.dtypes_of(v) and not other_arch(v)]
    return list(dict.fromkeys(firsts))


def unused(fam, device: str, req: requests.Request, chosen: list, later: list[str]) -> list[str]:
    """A warning for each --param no variant of this run, nor of the runs in the `later` dtypes, uses."""
    everyone = chosen + [v for d in later for v in runnable(fam, device, dataclasses.replace(req, dtype=d))[0]]
    taken = {k for v in everyone for k in v.params} | {k for k in req.params if k in fam.params and
                                                       any(render.uses(fam, v, k) for v in everyone)}
    return [f"--param {k}: no chosen variant uses it" for k in dict.fromkeys(req.given_params) if k not in taken]


def build_all(fam, chosen: list, params: dict, on_event=events.ignore) -> dict:
    """{variant: (ops, BuildInfo)}, each build's loops read from its compiler's output."""
    built = {}
    for v in chosen:
        ops, info = build(fam, v, params, on_event)
        built[v.name] = ops, info.with_loops(remarks.loops(folder(info.name), fam, v))
    return built


def execute(req: requests.Request, on_event=events.ignore) -> RunResult:
    """Build, check and time every chosen variant; the baselines are timed in the same run. The device's lease
    (lease.py) is held shared while building and checking, and alone while timing."""
    import torch

    fam = req.load_family()
    spec = specs.load(fam)
    baselines = chosen_baselines(spec, req)
    device = resolve_device(req.device, fam, req.variant)
    here = fam.variants_for(device)
    if req.own_dtypes and here and not any(req.dtype in fam.dtypes_of(v) for v in here):
        req = dataclasses.replace(req, dtype=fam.dtypes_of(here[0])[0])  # none takes the family's first dtype
    chosen, skipped = runnable(fam, device, req)
    key = lease.of(device)
    waiting = lambda: on_event(events.WAIT, device=key)  # noqa: E731
    with lease.held(key, exclusive=False, on_wait=waiting) as waited_first:
        built = build_all(fam, chosen, req.params, on_event)
        used = {k: v for k, v in req.params.items() if k in fam.params and any(render.uses(fam, c, k) for c in chosen)}
        later = other_dtypes(fam, device, req)
        result = RunResult(fam.name, device, req.dtype, req.seed, req.sizes, used, torch.__version__,
                           warnings=[*req.warnings, *unused(fam, device, req, chosen, later), *skipped],
                           other_dtypes=later)
        dtype = getattr(torch, req.dtype)
        main = make_inputs(spec, req.sizes, dtype, device, req.seed, main_distribution(fam))
        _check_all(spec, fam, req, result, built, main, dtype, on_event)
    passed = {v.variant: built[v.variant][0] for v in result.variants if v.check.ok}  # a wrong kernel is not timed
    if fam.bench and req.bench:
        result.not_timed = [v.variant for v in result.variants if not v.check.ok]
    if fam.bench and req.bench and passed:
        with lease.held(key, exclusive=True, on_wait=waiting) as waited:
            on_event(events.PHASE, phase="time")
            with neighbours.Watch(device, host=spec.wall_clock or device == "cpu") as watch:
                result.lease = {"device": key, "waited_s": waited_first + waited, "timed_from": time.time()}
                _time(spec, req, result, passed, baselines, main, dtype, on_event)
                result.lease["timed_to"] = time.time()
        _neighbours(result, watch.seen)
    if device == "cuda":  # the GPU may be shared: what this run cached goes back to it (playground.run in a loop)
        del main
        torch.cuda.empty_cache()
    return result


def _check_all(spec, fam, req, result: RunResult, built: dict, main, dtype, on_event) -> None:
    """Check every built variant on the run's inputs; its kernels' resources from the build."""
    on_event(events.PHASE, phase="check")
    arch = resources.Device.current().arch if result.device == "cuda" else None
    for name, (ops, info) in built.items():
        v = fam.variants[name]
        check, stdout, extra = check_variant(spec, fam, req, ops, name, main, dtype, result.device, on_event)
        kernels = resources.for_dtype(resources.of_build(info.name, arch), req.dtype)
        own = {k: x for k, x in fam.params_for(v, req.params).items() if k in v.params}
        result.variants.append(VariantResult(variant=name, note=v.note, params=own, build=info, check=check,
                                             stdout=stdout, extra=extra, kernels=kernels))


def _neighbours(result: RunResult, seen: neighbours.Seen) -> None:
    """What else used the device while timing: a warning when anything did; "from an idle GPU" only when
    NVML saw nothing else there."""
    result.neighbours = seen.to_dict()
    if seen.warning():
        result.warnings.append(seen.warning())
    if result.device == "cuda" and not seen.idle_gpu():
        said = f", the GPU shared with {seen.gpu_others} other process(es)" if seen.gpu_others else ", others on the GPU unknown"
        told = lambda clock: {k: dataclasses.replace(t, method=t.method.replace(timing.IDLE, said)) for k, t in clock.items()}  # noqa: E731
        for who in [*result.variants, *result.baselines.values()]:
            who.set_times(told(who.timings), told(who.walls))


def _time(spec, req, result: RunResult, ops: dict, baselines: dict, main, dtype, on_event=events.ignore) -> None:
    """Time every variant in `ops` (those that passed the check) and every baseline in one round-robin, on fresh
    inputs; judge what the timer saw; fill in the rates and the speedups."""
    from .peaks import peaks
    from .timing import copy_bandwidth

    device = result.device
    nbytes = spec.traffic(req.sizes, dtype) if spec.traffic else 0
    flops = spec.flops(req.sizes) if spec.flops else 0
    alive = _heartbeat(on_event, min(0.25, max(0.01, req.timeout / 10)))  # a tenth of the timeout, at most
    pool = trust.pool(spec, req, main, dtype, device, nbytes, _contenders(spec, ops, baselines, main), alive)
    functions = {("variant", v): spec.function(ops[v], v) for v in ops} | {("baseline", b): fn for b, fn in baselines.items()}
    steps = {who: [spec.timings(fn, x) for x in pool] for who, fn in functions.items()}
    maths = {v: var.math for v, var in req.load_family().variants.items() if v in ops}  # tf32: its own tolerance
    outputs = trust.TimedOutputs(spec, pool, dtype, req.seed, alive, maths)
    fns, change = _changing(spec, pool, functions, steps, outputs.change)
    stats, walls = _bench(spec, req, fns, device, lambda *seen: (outputs.observe(*seen), alive()), change)
    result.traffic, result.flops = nbytes or None, flops or None
    result.copy_gbps = copy_bandwidth(device) if nbytes and device == "cuda" else None
    result.inputs_timed = len(pool)
    peak = peaks(device)
    roof = _roof(result, peak, nbytes, flops)
    tf32 = _tf32_roof(result, peak, nbytes, flops) if "tf32" in (maths.get(v) for v in ops) else None
    contenders = [(("baseline", name), BaselineResult(name=name)) for name in baselines]
    contenders += [(("variant", v.variant), v) for v in result.variants if v.variant in ops]
    for key, who in contenders:
        labels = steps[key][0]
        who.set_times({s: stats[(*key, s)] for s in labels}, {s: walls[(*key, s)] for s in labels} if walls else {})
        _rates(who, nbytes, flops, tf32 if key[0] == "variant" and maths.get(key[1]) == "tf32" and tf32 else roof)
    result.baselines = {who.name: who for key, who in contenders if key[0] == "baseline"}
    for key, who in contenders:
        who.compare(result.baselines)
    _judge(spec, result, outputs, peak)
    if device == "cuda":
        launches(result, {who: each[0] for who, each in steps.items()})  # the steps on the requested input


def _changing(spec, pool: list, functions: dict, steps: dict, change) -> tuple[dict, object]:
    """The timed steps, {(kind, name, label): [(prepare, run) per input]}, and what runs before each timed call:
    change(k). A spec's own timings may copy the inputs into its steps once (lltm's leaves): its steps are made
    again from the changed input after every change, and each call goes through the latest."""
    if spec.timings is specs.one_step:
        return {(*who, label): [s[label] for s in each] for who, each in steps.items() for label in each[0]}, change

    def remade(k: int) -> None:
        change(k)
        for who, fn in functions.items():
            steps[who][k] = spec.timings(fn, pool[k])

    def latest(who, k, label):
        return (lambda: steps[who][k][label][0](), lambda *args: steps[who][k][label][1](*args))

    fns = {(*who, label): [latest(who, k, label) for k in range(len(pool))] for who, each in steps.items()
           for label in each[0]}
    return fns, remade


def _judge(spec, result: RunResult, outputs, peak) -> None:
    """What the timer saw fails the check where it cannot be trusted (trust.py)."""
    import torch

    major = torch.cuda.get_device_capability()[0] if result.device == "cuda" else None
    for v in (v for v in result.variants if v.time):
        found = [*outputs.findings(v.variant, v.timings), *trust.unseen_work(v.timings),
                 *([] if spec.wall_clock else trust.impossible(v, peak, major, result.dtype))]  # warm: the L2 may serve it
        if found:
            v.untrusted = v.check.ok
            v.check = v.check.failing(found)


def launches(result: RunResult, steps: dict) -> None:
    """One profiled call of each contender, after the timing: its kernels as launched, with their occupancy."""
    try:
        gpu = resources.Device.current()
        calls = [[(run, prepare()) for prepare, run in map(as_pair, labelled.values())] for labelled in steps.values()]
        traced = resources.trace_each([lambda call=call: [run(*args) for run, args in call] for call in calls])
        for ((kind, name), _), work in zip(steps.items(), traced):
            records = resources.launches(work)
            if kind == "baseline":
                result.baselines[name].kernels = resources.launched([], records, gpu)
            else:
                v = next(v for v in result.variants if v.variant == name)
                v.kernels = resources.launched(resources.of_build(v.build.name, gpu.arch), records, gpu)
    except Exception as e:  # the profiler is an extra: it never fails a run that passed
        result.warnings.append(f"kernel launches not profiled: {first_line(e)}")


def _bench(spec, req, fns: dict, device: str, observe, before) -> tuple[dict, dict]:
    """Tiny ops (WALL_CLOCK): the host's overhead matters, so each call is timed warm, after one of its
    own (as in a model that runs the op step after step), from an idle GPU (the events then include
    the host's path to the first kernel), and also on a synchronized wall clock."""
    from .timing import bench

    try:
        stats = bench(fns, device, budget_s=req.budget_s, warm=spec.wall_clock, observe=observe, before=before)
        walls = bench(fns, device, budget_s=req.budget_s, wall=True, warm=True, observe=observe,
                      before=before) if device == "cuda" and spec.wall_clock else {}
    except Exception as e:  # a kernel that passed the check and fails when timed
        raise KernelCrash(f"{req.family} failed while timing: {first_line(e)}") from None
    return stats, walls


def _heartbeat(on_event, every_s: float):
    """events.ALIVE after a timed call, at most every `every_s`: --timeout then bounds one call, not the timing.
    The parent counts the timeout from the last beat, so a call may have up to `every_s` less than it."""
    import time

    last = [time.monotonic()]

    def beat(*_):
        if time.monotonic() - last[0] >= every_s:
            last[0] = time.monotonic()
            on_event(events.ALIVE)

    return beat


def _contenders(spec, ops: dict, baselines: dict, inputs) -> int:
    """How many timings take turns: every variant and baseline, times the steps of one (forward, backward)."""
    first = next(iter(ops))
    return (len(ops) + len(baselines)) * len(spec.timings(spec.function(ops[first], first), inputs))


def _rates(who, nbytes: int, flops: int, roof_s: float | None) -> None:
    """GB/s, GFLOP/s and % of the roofline from the call's time."""
    seconds = who.time.median_s
    who.gbps = nbytes / seconds / 1e9 if nbytes else None
    who.gflops = flops / seconds / 1e9 if flops else None
    who.pct_peak = 100 * roof_s / seconds if roof_s and seconds else None


def _tf32_roof(result: RunResult, peak, nbytes: int, flops: int) -> float | None:
    """A float32 run's TF32 variants (math = "tf32") are held to the tensor cores' TF32 ceiling, not the CUDA
    cores': its seconds, noted in the record's peak_source (None where the GPU has no TF32 figure)."""
    roof = peak.roof(nbytes, flops, "tf32") if peak and result.dtype == "float32" and peak.flops("tf32") else None
    if roof:
        result.peak_source["tf32"] = f"{peak.flops('tf32'):,.0f} GFLOP/s = {peak.source['tf32']}"
    return roof[0] if roof else None


def _roof(result: RunResult, peak, nbytes: int, flops: int) -> float | None:
    """Record the device's peaks; the seconds a call needs at the binding ceiling (None: no peak)."""
    if peak is None:
        return None
    result.peak_gbps, result.peak_gflops = peak.bandwidth_gbps, peak.flops(result.dtype)
    result.peak_source = {k: v for k, v in peak.source.items() if k in ("bandwidth", result.dtype)}
    roof = peak.roof(nbytes, flops, result.dtype)
    if roof is None:
        return None
    result.bound = roof[1]
    return roof[0]


def run(name: str, on_event=events.ignore, **options) -> RunResult:
    """The notebook entry point, in this process: run("sum", sizes={"n": 10**7}, device="cpu")."""
    return execute(requests.make(name, **options), on_event)


def load(name: str, variant: str | None = None, device: str = "cpu", params: dict | None = None,
         paths: list[str] | None = None):
    """Build (or reuse) one variant and return its ops, ready to call on tensors."""
    req = requests.make(name, device=device, variant=variant, params=params, paths=paths)
    fam = req.load_family()
    return build(fam, fam.pick_variants(device, variant)[0], req.params)[0]
