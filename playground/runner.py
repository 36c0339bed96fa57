"""One run: request -> spec -> build -> inputs -> kernel + reference -> check -> bench -> record."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import events, render, request as requests, resources, spec as specs
from .build import BuildInfo, build
from .check import Check, as_tuple, compare, failed, merge
from .errors import CHECK_FAILED, PASSED, KernelCrash, UsageError
from .timing import Stats, as_pair


@dataclass(kw_only=True)
class Timed:
    """A contender's timing: the whole call, each step (forward, backward), and the rates from them."""

    time: Stats | None = None  # the call: the steps' medians added, on the clock that counts
    timings: dict = field(default_factory=dict)  # step -> Stats (CUDA events on a GPU)
    walls: dict = field(default_factory=dict)  # step -> Stats on a synchronized wall clock (tiny ops on a GPU)
    gbps: float | None = None
    gflops: float | None = None
    pct_peak: float | None = None  # of the device's roofline at this call's intensity (GPU): see RunResult.bound


@dataclass(kw_only=True)
class BaselineResult(Timed):
    name: str
    kernels: list = field(default_factory=list)  # the CUDA kernels one call launched (resources.launched)


@dataclass(kw_only=True)
class VariantResult(Timed):
    variant: str
    note: str
    build: BuildInfo
    check: Check
    speedup: float | None = None  # the first baseline's time over this one's
    speedups: dict = field(default_factory=dict)  # baseline -> step -> ratio
    stdout: str = ""
    extra: dict = field(default_factory=dict)  # spec.extra verdicts, e.g. gradcheck
    kernels: list = field(default_factory=list)  # its CUDA kernels: the build's resources, on a GPU the launches'


@dataclass
class RunResult:
    family: str
    device: str
    dtype: str
    seed: int
    sizes: dict
    params: dict  # the parameters the chosen variants use
    torch: str
    peak_gbps: float | None = None  # the device's memory bandwidth (device.py), GPU only
    peak_gflops: float | None = None  # the device's FLOP/s for this dtype on the CUDA cores, GPU only
    peak_source: dict = field(default_factory=dict)  # how each peak was computed, from the device's attributes
    copy_gbps: float | None = None  # a device-to-device copy, measured here: a second, attainable reference
    traffic: int | None = None  # bytes per timed call (spec.traffic)
    flops: int | None = None  # FLOP per timed call (spec.flops)
    bound: str | None = None  # "memory" or "compute": the ceiling that limits a call at this intensity
    inputs_timed: int = 0  # the seeded inputs the timed calls took turns on
    baselines: dict = field(default_factory=dict)  # name -> BaselineResult
    variants: list[VariantResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(v.check.ok for v in self.variants)

    @property
    def exit_code(self) -> int:
        return PASSED if self.ok else CHECK_FAILED

    def to_dict(self) -> dict:
        """Plain JSON data: what --json prints and the tables are built from (inf and NaN become null)."""
        return _finite({**asdict(self), "ok": self.ok, "exit_code": self.exit_code})


def _finite(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


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
    """The baselines this run times: --baseline picks, --skip-baseline drops; unknown names are errors."""
    for option, name in [*(("--baseline", b) for b in req.baselines), *(("--skip-baseline", b) for b in req.skip_baselines)]:
        if name not in spec.baselines:
            close = difflib.get_close_matches(name, spec.baselines, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise UsageError(f"{option} {name}: {req.family} has no such baseline; {hint}"
                             f"it has {', '.join(spec.baselines) or 'none'}")
    names = req.baselines or [n for n in spec.baselines if n not in req.skip_baselines][:1 if req.one_baseline else None]
    return {n: spec.baselines[n] for n in names}


def execute(req: requests.Request, on_event=events.ignore) -> RunResult:
    """Build, check and time every chosen variant; the baselines are timed in the same run."""
    import torch

    fam = req.load_family()
    spec = specs.load(fam)
    baselines = chosen_baselines(spec, req)
    device = resolve_device(req.device, fam, req.variant)
    chosen = fam.pick_variants(device, req.variant)
    built = {v.name: build(fam, v, req.params, on_event) for v in chosen}  # every CUDA build has -lineinfo
    used = {k: v for k, v in req.params.items() if any(render.uses(fam, c, k) for c in chosen)}
    unused = [f"--param {k}: no chosen variant uses it" for k in req.given_params if k not in used]
    result = RunResult(fam.name, device, req.dtype, req.seed, req.sizes, used, torch.__version__,
                       warnings=[*req.warnings, *unused])
    dtype = getattr(torch, req.dtype)
    main = _inputs(spec, req.sizes, dtype, device, req.seed)
    on_event(events.PHASE, phase="check")
    arch = resources.Device.current().arch if device == "cuda" else None
    for v in chosen:
        ops, info = built[v.name]
        check, stdout = _check_all(spec, fam, req, ops, v.name, main, dtype, device, on_event)
        extra = spec.extra(ops, v.name, main)
        failing = [f"{k}: FAIL" for k, val in extra.items() if val == "FAIL"]  # e.g. gradcheck
        if failing:
            check = dataclasses.replace(check, ok=False, mismatches=check.mismatches + failing)
        kernels = resources.for_dtype(resources.of_build(info.name, arch), req.dtype)
        result.variants.append(VariantResult(variant=v.name, note=v.note, build=info, check=check, stdout=stdout,
                                             extra=extra, kernels=kernels))
    if fam.bench and req.bench:
        on_event(events.PHASE, phase="time")
        _time(spec, req, result, {k: ops for k, (ops, _) in built.items()}, baselines, main, dtype)
    return result


def _check_all(spec, fam, req, ops, variant, main, dtype, device, on_event) -> tuple[Check, str]:
    """The check at every case (_cases), on poisoned memory, in order."""
    checks, shown = [], ""
    try:
        for label, make in _cases(spec, fam, req, main, dtype, device):
            on_event(events.CHECK, variant=variant, case=label)
            check, stdout = _check(spec, ops, variant, make(), dtype, label)
            checks.append(check)
            shown = stdout if not label.endswith(" probed") else shown  # what the requested size printed
        if "values" not in req.sizes:
            on_event(events.CHECK, variant=variant, case=_label(fam, req.sizes) + " reused")
            main_ok = all(c.ok for c in checks if c.cases == [_label(fam, req.sizes)])  # fresh memory, this size
            reused = _check_reused(spec, ops, variant, main, dtype, _label(fam, req.sizes), fresh_ok=main_ok)
            checks += [reused] if reused else []
    except KernelCrash as e:
        raise KernelCrash(_in_sources(str(e), fam, fam.variants[variant])) from None
    return merge(checks), shown


REUSED = ("the same memory with new values gave a wrong answer: a result kept from an earlier call "
          "(cached by its pointer, or by a sample of its values), or work still running on another stream?")


def _check_reused(spec, ops, variant, main, dtype, label, fresh_ok: bool) -> Check | None:
    """The requested size in memory the kernel has seen before, its floating-point values negated in place
    (the first and the last kept): a result cached by pointer, or by a hash of a few elements, is stale
    here and fails, with the likely causes first where the same size passed in fresh memory (`fresh_ok`).
    None where nothing can change (no float input) or the output is printed."""
    import torch

    inputs = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in main)
    floats = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 2
              and x.is_contiguous()]
    if not floats or spec.from_stdout:
        return None
    case = label + " reused"
    try:
        spec.call(ops, variant, *inputs)  # what a cache would keep
    except Exception as e:
        raise KernelCrash(f"{variant} raised at {case}: {_first_line(e)}") from None
    for x in floats:  # in place: the same pointer, the same first and last elements
        x.view(-1)[1:-1].neg_()
    check, _ = _check(spec, ops, variant, inputs, dtype, case)
    if check.ok or not fresh_ok:
        return check
    return dataclasses.replace(check, mismatches=[f"{case}: {REUSED}", *check.mismatches])


def _label(fam, sizes: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items() if k in fam.sizes)


def _cases(spec, fam, req, main, dtype, device):
    """(label, inputs maker): each test size, the requested size (inputs `main`), and its probe if the spec has one."""
    import torch

    label = functools.partial(_label, fam)

    for test in ([] if "values" in req.sizes else fam.test_sizes):
        sizes = {**req.sizes, **test}
        yield label(sizes), lambda sizes=sizes: _inputs(spec, sizes, dtype, device, req.seed)
    yield label(req.sizes), lambda: main
    if spec.probe and "values" not in req.sizes:  # the same size, changed where each element's position matters
        yield label(req.sizes) + " probed", lambda: spec.probe(main, dtype, torch.Generator().manual_seed(req.seed + 1))


# The timed inputs together exceed this where memory allows: on a GPU any L2 (the H200's is 50 MB); on a CPU
# 64 MB (a laptop's last-level cache is 8-36 MB), or four times the last-level cache where Linux says more.
POOL_BYTES = {"cuda": 256 << 20, "cpu": 64 << 20}
POOL_MAX = 8  # but there are never more than this many (each costs a make_inputs and a reference)


def _time(spec, req, result, ops: dict, baselines: dict, inputs, dtype) -> None:
    """Time every variant and baseline in one round-robin, on fresh inputs; judge what the timer saw;
    fill in the rates and the speedups."""
    from .device import peaks
    from .timing import copy_bandwidth

    device = result.device
    nbytes = spec.traffic(req.sizes, dtype) if spec.traffic else 0
    flops = spec.flops(req.sizes) if spec.flops else 0
    pool = _pool(spec, req, inputs, dtype, device, nbytes, _contenders(spec, ops, baselines, inputs))
    expected = [(spec.reference(*x), as_tuple(spec.tolerance(*x, dtype)[0])) for x in pool]
    steps = {("variant", v): [spec.timings(spec.function(ops[v], v), x) for x in pool] for v in ops}
    steps |= {("baseline", b): [spec.timings(fn, x) for x in pool] for b, fn in baselines.items()}
    fns = {(*who, label): [s[label] for s in each] for who, each in steps.items() for label in each[0]}
    deviations = {key: [] for key in fns if key[0] == "variant"}

    def observe(key, k, out):  # each timed call's output against the reference for its own input, untimed
        if key in deviations:
            deviations[key].append((k, _deviation(out, expected[k][0])))

    stats, walls = _bench(spec, req, fns, device, observe)
    result.traffic, result.flops = nbytes or None, flops or None
    result.copy_gbps = copy_bandwidth(device) if nbytes and device == "cuda" else None
    result.inputs_timed = len(pool)
    roof = _roof(result, peaks(device), nbytes, flops)
    rates = dict(nbytes=nbytes, flops=flops, roof_s=roof)
    for name in baselines:
        key = ("baseline", name)
        result.baselines[name] = _timed(BaselineResult(name=name), key, steps[key][0], stats, walls, rates)
    for v in result.variants:
        key = ("variant", v.variant)
        _timed(v, key, steps[key][0], stats, walls, rates)
        _speedups(v, result.baselines)
        found = [*_timed_outputs(deviations, key, expected, v.timings, spec.outputs), *_unseen_work(v.timings),
                 *([] if spec.wall_clock else _impossible(v, device, req.dtype))]  # warm, unflushed: the L2 may serve it
        if found:
            v.check = dataclasses.replace(v.check, ok=False, mismatches=v.check.mismatches + found)
    if device == "cuda":
        _profile(result, {who: each[0] for who, each in steps.items()})  # the steps on the requested input


def _profile(result: RunResult, steps: dict) -> None:
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
        result.warnings.append(f"kernel launches not profiled: {_first_line(e)}")


def _speedups(v, baselines: dict) -> None:
    """Each baseline's time over the variant's, per step, and the first baseline's over the whole call."""
    v.speedups = {b: {label: t.median_s / (v.walls or v.timings)[label].median_s
                      for label, t in (base.walls or base.timings).items()} for b, base in baselines.items()}
    first = next(iter(baselines.values()), None)
    v.speedup = first.time.median_s / v.time.median_s if first else None


def _bench(spec, req, fns: dict, device: str, observe) -> tuple[dict, dict]:
    """Tiny ops (WALL_CLOCK): the host's overhead matters, so each call is timed warm, after one of its
    own (as in a model that runs the op step after step), from an idle GPU (the events then include
    the host's path to the first kernel), and also on a synchronized wall clock."""
    from .timing import bench

    try:
        stats = bench(fns, device, budget_s=req.budget_s, warm=spec.wall_clock, observe=observe)
        walls = bench(fns, device, budget_s=req.budget_s, wall=True, warm=True) if device == "cuda" and spec.wall_clock else {}
    except Exception as e:  # a kernel that passed the check and fails when timed
        raise KernelCrash(f"{req.family} failed while timing: {_first_line(e)}") from None
    return stats, walls


def _contenders(spec, ops: dict, baselines: dict, inputs) -> int:
    """How many timings take turns: every variant and baseline, times the steps of one (forward, backward)."""
    first = next(iter(ops))
    return (len(ops) + len(baselines)) * len(spec.timings(spec.function(ops[first], first), inputs))


def _pool(spec, req, main, dtype, device, nbytes, contenders: int) -> list:
    """The inputs the timed calls take turns on: `main` and more seeded ones, so that no two consecutive calls
    see the same pointer or the same data (a result cached by pointer or by content does not pay). Their
    count does not divide the contenders' (see timing._turns), and takes a quarter of the free memory at most."""
    target = POOL_BYTES[device] if device == "cuda" else max(POOL_BYTES["cpu"], 4 * _last_level_cache())
    want = max(3, min(POOL_MAX, -(-target // max(nbytes, 1))))
    want = next(k for k in range(want, want + contenders + 1) if contenders % k)
    count = max(1, min(want, _free_bytes(device) // 4 // max(nbytes, 1)))
    return [main, *(_inputs(spec, req.sizes, dtype, device, req.seed + 1000 + k) for k in range(1, count))]


def _last_level_cache() -> int:
    """The CPU's largest cache in bytes, from Linux's sysfs (e.g. '32768K'); 0 where it cannot be read."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        with contextlib.suppress(OSError, ValueError):
            text = f.read_text().strip()
            sizes.append(int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1:], 0))
    return max(sizes, default=0)


def _free_bytes(device: str) -> int:
    """Memory the pool may use: the GPU's free memory, or the host's MemAvailable (Linux); elsewhere 1 GB."""
    import torch

    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return 1 << 30


def _deviation(out, ref):
    """The largest |out - ref| of each output the timed step returned (a forward: the first outputs), NaN
    scored as compare scores it, as one tensor left on the device (no sync inside the timing loop); an
    output that cannot be compared scores 0 and keeps its place. None where nothing can be compared."""
    import torch

    outs, refs = as_tuple(out), as_tuple(ref)
    if len(outs) > len(refs) or not any(isinstance(o, torch.Tensor) for o in outs):
        return None
    errors = []
    for o, r in zip(outs, refs):
        if not isinstance(o, torch.Tensor) or o.shape != r.shape or not o.numel():
            errors.append(torch.zeros((), dtype=torch.float64, device=r.device))
            continue
        o64, r64 = o.detach().double(), r.to(o.device).double()
        err = torch.where(o64.isnan() & r64.isnan(), 0.0, (o64 - r64).abs())
        errors.append(torch.where(o64.isnan() != r64.isnan(), float("inf"), err).max())
    return torch.stack([e.to(errors[0].device) for e in errors])


def _timed_outputs(deviations, key, expected, timings, names=()) -> list[str]:
    """A timed call whose output is not the reference of its own input: a result cached from another call,
    or work still running when the output was read."""
    for label in timings:
        for k, dev in deviations.get((*key[:2], label), []):
            if dev is None:
                continue
            tols = expected[k][1] * len(dev) if len(expected[k][1]) == 1 else expected[k][1][:len(dev)]
            for i, (e, t) in enumerate(zip(dev.cpu().tolist(), tols)):
                if not e <= t:  # NaN fails too
                    name = names[i] if i < len(names) else f"output {i}"
                    return [f"timing: {label} on timed input {k + 1}: {name} off by {e:.3g} (tolerance {t:.3g}): "
                            f"a result kept from another call?"]
    return []


def _unseen_work(timings) -> list[str]:
    """The tail: how long a device-wide sync still waited after the end event on PyTorch's stream had fired.
    An honest call's tail is what the sync itself costs (an empty call's, measured in the same run) plus
    jitter; work the events did not wait for, on another stream, adds its time."""
    for label, t in timings.items():
        if t.tail_s is None or t.tail_floor_s is None:
            continue
        allowed = 2 * t.tail_floor_s + 0.1 * t.median_s + 5e-6
        if t.tail_s > allowed:
            return [f"timing: {label}: a device-wide sync waited {t.tail_s * 1e6:,.0f} us after the events on "
                    f"PyTorch's stream had ended (allowed {allowed * 1e6:,.0f} us): work on another stream?"]
    return []


# A kernel on the tensor cores may beat the CUDA cores' FLOP peak (device.py's figure) by their dense ratio,
# by compute capability's major: on Ampere (8) and Hopper (9) about 8x in float32 (as TF32) and 2x in float64,
# on Volta and Turing (7) none in either.
# A rate above that is no kernel's. Where the ratio is not known (Blackwell's TF32 is about 15x), no guard.
TENSOR_CORES = {7: {"float32": 1.0, "float64": 1.0},
                8: {"float32": 8.0, "float64": 2.0}, 9: {"float32": 8.0, "float64": 2.0}}


def _impossible(v, device, dtype: str) -> list[str]:
    """On a GPU, a bandwidth above the memory's peak, or a FLOP rate above the compute ceiling, is an error in
    the timing, not a speedup."""
    from .device import peaks

    peak = peaks(device)
    if not peak:
        return []
    found = []
    if v.gbps and v.gbps > peak.bandwidth_gbps:
        found.append(f"timing: {v.gbps:,.0f} GB/s is above this GPU's peak of {peak.bandwidth_gbps:,.0f} GB/s: "
                     "the timer missed the work")
    ratio = TENSOR_CORES.get(_major(device), {}).get(dtype)
    ceiling = peak.flops(dtype) and ratio and peak.flops(dtype) * ratio
    if v.gflops and ceiling and v.gflops > ceiling:
        found.append(f"timing: {v.gflops:,.0f} GFLOP/s is above this GPU's {dtype} ceiling of {ceiling:,.0f} "
                     "GFLOP/s (tensor cores included): the timer missed the work")
    return found


def _major(device: str) -> int | None:
    import torch

    return torch.cuda.get_device_capability()[0] if device == "cuda" else None


def _timed(target: Timed, key: tuple, labels, stats: dict, walls: dict, rates: dict) -> Timed:
    """Fill a contender's timings from the bench tables (keyed kind, name, step) and its rates."""
    target.timings = {label: stats[(*key, label)] for label in labels}
    target.walls = {label: walls[(*key, label)] for label in labels} if walls else {}
    target.time = _total(target.walls or target.timings)  # the wall clock counts where it was measured
    seconds = target.time.median_s
    target.gbps = rates["nbytes"] / seconds / 1e9 if rates["nbytes"] else None
    target.gflops = rates["flops"] / seconds / 1e9 if rates["flops"] else None
    target.pct_peak = 100 * rates["roof_s"] / seconds if rates["roof_s"] and seconds else None
    return target


def _roof(result: RunResult, peak, nbytes: int, flops: int) -> float | None:
    """Record the device's peaks on the result; the seconds a call needs at the binding ceiling (None: no peak)."""
    if peak is None:
        return None
    result.peak_gbps, result.peak_gflops = peak.bandwidth_gbps, peak.flops(result.dtype)
    result.peak_source = {k: v for k, v in peak.source.items() if k in ("bandwidth", result.dtype)}
    roof = peak.roof(nbytes, flops, result.dtype)
    if roof is None:
        return None
    result.bound = roof[1]
    return roof[0]


def _total(timings: dict) -> Stats:
    """One step's stats, or the sum of the steps' (forward + backward) as one record."""
    if len(timings) == 1:
        return next(iter(timings.values()))
    parts = list(timings.values())
    median = sum(t.median_s for t in parts)
    noise = math.sqrt(sum((t.noise * t.median_s) ** 2 for t in parts)) / median if median else 0.0  # independent steps
    return Stats(median, sum(t.q1_s for t in parts), sum(t.q3_s for t in parts), min(t.samples for t in parts),
                 parts[0].method + ", " + " + ".join(timings), noise=noise, dropped=max(t.dropped for t in parts))


def _inputs(spec, sizes, dtype, device, seed):
    """Seeded inputs, made on the CPU (the same numbers on every device), then moved."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    try:
        made = spec.make_inputs(sizes, dtype, "cpu", gen)
        return tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in made)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except (RuntimeError, MemoryError) as e:
        if isinstance(e, MemoryError) or "memory" in str(e).lower() or "alloc" in str(e).lower():
            shown = ", ".join(f"{k}={v:,}" for k, v in sizes.items() if isinstance(v, int))
            raise UsageError(f"not enough memory for the inputs at {shown}") from None
        raise


def _check(spec, ops, variant: str, inputs, dtype, case: str) -> tuple[Check, str]:
    """Run the variant once on poisoned memory and compare; the input must come back unchanged."""
    import torch

    from .capture import stdout_fd

    ref = spec.reference(*inputs)
    tol, source = spec.tolerance(*inputs, dtype)
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    if spec.output_like:
        _poison(spec.output_like(*inputs))
    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs)
    try:
        with stdout_fd() as printed:
            made = spec.call(ops, variant, *inputs)
            # Each output is read in stream order on PyTorch's current stream, before any device-wide sync:
            # a kernel whose work is still running on another stream gives what the poisoned memory held.
            out = _read_in_stream_order(made) if cuda else made
            if cuda:
                torch.cuda.synchronize()  # an error in work that nothing read shows here; printf reaches stdout
    except Exception as e:
        raise KernelCrash(f"{variant} raised at {case}: {_first_line(e)}") from None
    if spec.from_stdout:
        try:
            out = spec.from_stdout(printed.text, *inputs)
        except AssertionError as e:
            return failed(str(e), source, case), printed.text
    result = compare(out, ref, tol, source, case, spec.outputs)
    if cuda and not result.ok and _moved(out, made):
        result = dataclasses.replace(result, mismatches=[f"{case}: {LATE}", *result.mismatches])
    for k, (a, b) in enumerate(zip(before, inputs)):
        if isinstance(a, torch.Tensor) and not torch.equal(a, b) and not (a.isnan() & b.isnan() | (a == b)).all():
            result = failed(f"input {k} was changed by the kernel (it must not write its input)", source, case)
    return result, printed.text


LATE = ("the output changed after PyTorch's stream had finished: work still running on another stream "
        "(launch on PyTorch's current stream, or make it wait for yours)")


def _moved(host, made) -> bool:
    """Whether an output read in stream order differs from the same output once the whole GPU has finished."""
    import torch

    for h, d in zip(as_tuple(host), as_tuple(made)):
        if isinstance(h, torch.Tensor) and isinstance(d, torch.Tensor):
            d = d.detach().cpu()
            if h.shape != d.shape:
                return True
            same = (h == d) | (h.isnan() & d.isnan()) if h.is_floating_point() else h == d
            if not bool(same.all()):
                return True
    return False


def _read_in_stream_order(out):
    """The outputs copied to pinned host memory on the current stream, which alone is then waited for (a
    copy to pageable memory may wait for more than that stream)."""
    import torch

    host = tuple(o.detach().to("cpu", non_blocking=True) if isinstance(o, torch.Tensor) else o for o in as_tuple(out))
    torch.cuda.current_stream().synchronize()
    return host if isinstance(out, (tuple, list)) else host[0]


def _poison(like):
    """Fill memory the allocator will hand out next with NaN (or -1), so unwritten outputs show."""
    import torch

    for t in like:
        junk = torch.empty_like(t)
        junk.fill_(float("nan") if t.is_floating_point() else -1)
        del junk


# A C++ check's message names the copy of the source in the build cache; these name the student's file.
CACHED = re.compile(r"\S*?(main\.cpp|cuda\.cu):(\d+)")
STD_CHECK = re.compile(r"^(?P<head>.*?: )\w+, (?P<where>\S+:\d+), (?P<msg>.*)$")  # STD_TORCH_CHECK: "fn, file:line, msg"


def _in_sources(message: str, fam, variant) -> str:
    """'... /cache/kplay_sum_cpp_1a2b/main.cpp:54 ...' -> '... snippets/sum/sum.cpp:54 ...'."""
    def source(m: re.Match) -> str:
        ours = [s for s in variant.sources if s.endswith(".cu") == (m[1] == "cuda.cu")]
        return f"{fam.path / ours[0]}:{m[2]}" if ours else m[0]

    mapped = CACHED.sub(source, message)
    std = STD_CHECK.match(mapped)
    return f"{std['head']}{std['msg']} ({std['where']})" if std else mapped


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def run(name: str, on_event=events.ignore, **options) -> RunResult:
    """The notebook entry point, in this process: run("sum", sizes={"n": 10**7}, device="cpu")."""
    return execute(requests.make(name, **options), on_event)
