"""One run: registry -> render -> build -> inputs -> kernel + reference -> check -> bench -> record."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
from dataclasses import asdict, dataclass, field

from . import registry, render
from .build import BuildInfo, build
from .check import Check, compare, failed, merge
from .errors import CHECK_FAILED, PASSED, KernelCrash, UsageError
from .timing import Stats

MAX_SIZE = 1 << 40
DTYPES = ("int32", "int64", "float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Plan:
    """A validated request; made without torch, so the CLI can reject bad input at once."""

    family: registry.Family
    device: str  # "auto", "cpu" or "cuda"
    variant: str | None
    dtype: str
    seed: int
    sizes: dict
    params: dict


@dataclass
class VariantResult:
    variant: str
    note: str
    build: BuildInfo
    check: Check
    time: Stats | None = None
    gbps: float | None = None
    gflops: float | None = None
    pct_peak: float | None = None
    speedup: float | None = None
    stdout: str = ""
    timings: dict = field(default_factory=dict)  # label (e.g. forward, backward) -> Stats
    walls: dict = field(default_factory=dict)  # the same on a synchronized wall clock (CUDA, tiny ops)
    speedups: dict = field(default_factory=dict)  # "label vs baseline" -> ratio (wall clock where measured)
    extra: dict = field(default_factory=dict)  # spec.extra columns, e.g. gradcheck


@dataclass
class RunResult:
    family: str
    device: str
    dtype: str
    seed: int
    sizes: dict
    params: dict
    torch: str
    baseline: Stats | None = None
    baseline_gbps: float | None = None
    baseline_gflops: float | None = None
    peak_gbps: float | None = None
    baselines: dict = field(default_factory=dict)  # name -> label -> Stats
    baseline_walls: dict = field(default_factory=dict)
    variants: list[VariantResult] = field(default_factory=list)

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


def parse_size(key: str, text) -> int:
    """'1e7', '10_000_000' or 10000000 -> 10000000; 0, -5, 1.5, abc and 1e99 are errors."""
    try:
        value = float(str(text).replace("_", ""))
    except ValueError:
        raise UsageError(f"--{key} {text}: not a number") from None
    if math.isnan(value) or value < 1:
        raise UsageError(f"--{key} {text}: must be at least 1")
    if value > MAX_SIZE:
        raise UsageError(f"--{key} {text}: too large (at most 2^40)")
    if value != int(value):
        raise UsageError(f"--{key} {text}: must be a whole number")
    return int(value)


def plan(name: str, *, device: str = "auto", variant: str | None = None, dtype: str | None = None,
         seed: int = 0, sizes: dict | None = None, params: dict | list | None = None,
         paths: list[str] | None = None) -> Plan:
    """Check a request against the family's task.toml."""
    fam = registry.find(name, paths)
    if device not in ("auto", *registry.DEVICES):
        raise UsageError(f"--device {device}: valid: auto, cpu, cuda")
    dtype = dtype or fam.dtypes[0]
    if dtype not in fam.dtypes:
        what = "known" if dtype in DTYPES else "unknown"
        raise UsageError(f"--dtype {dtype}: {what} dtype, but {fam.name} takes {', '.join(fam.dtypes)}")
    given = dict(sizes or {})
    for key in given:
        if key not in fam.sizes and not (key == "values" and fam.extra.get("values")):
            takes = ", ".join(f"--{k}" for k in fam.sizes) or "no size"
            raise UsageError(f"--{key} does not apply to {fam.name}; it takes {takes}")
    full = {k: parse_size(k, given.get(k, v)) for k, v in fam.sizes.items()}
    if "values" in given:
        full["values"] = _values(given["values"])
        full["n"] = len(full["values"])
    pairs = [f"{k}={v}" for k, v in params.items()] if isinstance(params, dict) else list(params or [])
    fixed = fam.parse_params(pairs)
    if device != "auto":
        fam.pick_variants(device, variant)
    return Plan(fam, device, variant, dtype, seed, full, fixed)


def _values(text) -> list[float]:
    items = text if isinstance(text, list) else [t for t in re.split(r"[,\s]+", str(text)) if t]
    try:
        values = [float(v) for v in items]
    except ValueError:
        raise UsageError(f"--values {text}: expected numbers separated by commas, e.g. 4,3,2,1") from None
    if not values:
        raise UsageError("--values: give at least one number")
    return [int(v) if v.is_integer() else v for v in values]


_specs: dict = {}


def load_spec(fam: registry.Family):
    """The family's spec.py, imported by path once per version (it may keep state, e.g. registrations)."""
    path = fam.path / "spec.py"
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _specs:
        spec = importlib.util.spec_from_file_location(f"kplay_spec_{fam.name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _specs[key] = module
    return _specs[key]


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is visible here (torch.cuda.is_available() is False); use --device cpu")
    return device


def execute(p: Plan, on_event=lambda *a, **k: None, budget_s: float = 0.3, bench: bool = True,
            compile_baseline: bool = True) -> RunResult:
    """Build, check and time every chosen variant; the reference is timed in the same run."""
    import torch

    from .timing import copy_bandwidth

    device = resolve_device(p.device)
    fam, dtype = p.family, getattr(torch, p.dtype)
    chosen = fam.pick_variants(device, p.variant)
    spec = load_spec(fam)
    built = {v.name: build(fam, v, p.params, on_event) for v in chosen}
    used = {k: v for k, v in p.params.items() if any(render.uses(fam, c, k) for c in chosen)}
    result = RunResult(fam.name, device, p.dtype, p.seed, p.sizes, used, torch.__version__)
    on_event("phase", phase="check")
    cases = [{**p.sizes, **t} for t in fam.test_sizes if "values" not in p.sizes]
    main = _inputs(spec, p.sizes, dtype, device, p.seed)
    for v in chosen:
        ops, info = built[v.name]
        checks, stdout = [], ""
        for c in [*cases, p.sizes]:
            on_event("check", variant=v.name, case=_label(c, fam))
            inputs = main if c is p.sizes else _inputs(spec, c, dtype, device, p.seed)
            check, stdout = _check(spec, ops, v.name, inputs, dtype, _label(c, fam))
            checks.append(check)
        verdict = merge(checks)
        extra = spec.extra(ops, v.name, main) if hasattr(spec, "extra") else {}
        failing = [f"{k}: FAIL" for k, val in extra.items() if val == "FAIL"]  # e.g. gradcheck
        if failing:
            verdict = dataclasses.replace(verdict, ok=False, mismatches=verdict.mismatches + failing)
        result.variants.append(VariantResult(v.name, v.note, info, verdict, stdout=stdout, extra=extra))
    if fam.bench and bench:
        on_event("phase", phase="time")
        _time(spec, p, result, built, main, dtype, device, budget_s, compile_baseline)
        if hasattr(spec, "traffic") and device == "cuda":
            result.peak_gbps = copy_bandwidth(device)
            for r in result.variants:
                r.pct_peak = r.gbps and 100 * r.gbps / result.peak_gbps
    return result


def _time(spec, p, result, built, inputs, dtype, device, budget_s, compile_baseline=True):
    """Time every variant and every PyTorch baseline in one round-robin; fill in the rates and speedups."""
    from .timing import bench

    def steps(ops, name):  # {label: (prepare, run)}: one unlabelled step unless the spec splits it
        if hasattr(spec, "timings"):
            return spec.timings(ops, name, inputs)
        return {"": (tuple, lambda: spec.call(ops, name, *inputs))}

    contenders = {v.variant: steps(built[v.variant][0], v.variant) for v in result.variants}
    if hasattr(spec, "baselines"):
        bases = spec.baselines(inputs, compile_baseline)
    else:
        bases = {"PyTorch": {"": (tuple, lambda: spec.baseline(*inputs))}} if hasattr(spec, "baseline") else {}
    fns = {(who, label): f for who, labelled in [*contenders.items(), *bases.items()] for label, f in labelled.items()}
    nbytes = spec.traffic(p.sizes, dtype) if hasattr(spec, "traffic") else 0
    flops = spec.flops(p.sizes) if hasattr(spec, "flops") else 0
    try:
        # Tiny ops (WALL_CLOCK): the host's overhead matters, so each call is timed warm, after one of its
        # own (as in a model that runs the op step after step), from an idle GPU (the events then include
        # the host's path to the first kernel), and also on a synchronized wall clock.
        tiny = getattr(spec, "WALL_CLOCK", False)
        stats = bench(fns, device, budget_s=budget_s, working_set=nbytes, warm=tiny)
        walls = bench(fns, device, budget_s=budget_s, wall=True, warm=True) if device == "cuda" and tiny else {}
    except Exception as e:  # a kernel that passed the check and fails when timed
        raise KernelCrash(f"{p.family.name} failed while timing: {_first_line(e)}") from None
    per = lambda table, who: {label: table[(who, label)] for label in (contenders | bases)[who]} if table else {}
    result.baselines = {who: per(stats, who) for who in bases}
    result.baseline_walls = {who: per(walls, who) for who in bases}
    first = next(iter(bases), None)
    result.baseline = first and _total(result.baselines[first])
    if result.baseline:
        result.baseline_gbps = nbytes / result.baseline.median_s / 1e9 if nbytes else None
        result.baseline_gflops = flops / result.baseline.median_s / 1e9 if flops else None
    for r in result.variants:
        r.timings, r.walls = per(stats, r.variant), per(walls, r.variant)
        r.time = _total(r.timings)
        r.gbps = nbytes / r.time.median_s / 1e9 if nbytes else None
        r.gflops = flops / r.time.median_s / 1e9 if flops else None
        r.speedup = result.baseline.median_s / r.time.median_s if result.baseline else None
        mine, theirs = (r.walls, result.baseline_walls) if r.walls else (r.timings, result.baselines)
        r.speedups = {f"{label} vs {who}".strip(): theirs[who][label].median_s / t.median_s
                      for who in bases for label, t in mine.items()}


def _total(timings: dict) -> Stats | None:
    """One label's stats, or the sum of the labels' (forward + backward) as one record."""
    if len(timings) == 1:
        return next(iter(timings.values()))
    if not timings:
        return None
    parts = list(timings.values())
    return Stats(sum(t.median_s for t in parts), sum(t.q1_s for t in parts), sum(t.q3_s for t in parts),
                 min(t.samples for t in parts), parts[0].method + ", " + " + ".join(timings))


def _label(sizes: dict, fam) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items() if k in fam.sizes)


def _inputs(spec, sizes, dtype, device, seed):
    """Seeded inputs, made on the CPU (the same numbers on every device), then moved."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    try:
        return tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in spec.make_inputs(sizes, dtype, "cpu", gen))
    except ValueError as e:
        raise UsageError(str(e)) from None
    except (RuntimeError, MemoryError) as e:
        if isinstance(e, MemoryError) or "memory" in str(e).lower() or "alloc" in str(e).lower():
            raise UsageError(f"not enough memory for the inputs at {sizes}") from None
        raise


def _check(spec, ops, variant: str, inputs, dtype, case: str) -> tuple[Check, str]:
    """Run the variant once on poisoned memory and compare; the input must come back unchanged."""
    import torch

    from .capture import stdout_fd

    ref = spec.reference(*inputs)
    tol, source = spec.tolerance(*inputs, dtype)
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    if hasattr(spec, "output_like"):
        _poison(spec.output_like(*inputs))
    try:
        with stdout_fd() as printed:
            out = spec.call(ops, variant, *inputs)
            if any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs):
                torch.cuda.synchronize()
    except Exception as e:
        raise KernelCrash(f"{variant} raised at {case}: {_first_line(e)}") from None
    if hasattr(spec, "from_stdout"):
        try:
            out = spec.from_stdout(printed.text, *inputs)
        except AssertionError as e:
            return failed(str(e), source, case), printed.text
    result = compare(out, ref, tol, source, case, getattr(spec, "OUTPUTS", ()))
    for k, (a, b) in enumerate(zip(before, inputs)):
        if isinstance(a, torch.Tensor) and not torch.equal(a, b) and not (a.isnan() & b.isnan() | (a == b)).all():
            result = failed(f"input {k} was changed by the kernel (it must not write its input)", source, case)
    return result, printed.text


def _poison(like):
    """Fill memory the allocator will hand out next with NaN (or -1), so unwritten outputs show."""
    import torch

    for t in like:
        junk = torch.empty_like(t)
        junk.fill_(float("nan") if t.is_floating_point() else -1)
        del junk


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def run(name: str, **request) -> RunResult:
    """The notebook entry point: plan and execute in this process, e.g. run("sum", sizes={"n": 10**7})."""
    options = {k: request.pop(k) for k in ("on_event", "budget_s", "bench", "compile_baseline") if k in request}
    return execute(plan(name, **request), **options)
