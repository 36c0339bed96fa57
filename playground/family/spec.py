"""A family's spec.py, loaded once and checked: its hooks, their signatures, and the defaults derived.

The engine reads a family only through the `Spec` made here; no other module probes a spec module.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..core.errors import UsageError

if TYPE_CHECKING:  # a type, not an arrow: spec is given a family, it never finds one
    from .registry import Family

# hook -> (required, the arguments the engine passes, what it is for). "..." means: then the inputs.
HOOKS = {
    "make_inputs": (True, ("sizes", "dtype", "device", "gen"), "seeded inputs"),
    "reference": (True, ("...",), "the exact answer"),
    "tolerance": (True, ("...", "dtype"), "(atol, where it comes from)"),
    "call": (True, ("ops", "variant", "..."), "run a variant, return its outputs"),
    "baseline": (False, ("...",), "the PyTorch op timed against, named BASELINE"),
    "function": (False, ("ops", "variant"), "the variant as a function of the inputs, for timing"),
    "timings": (False, ("fn", "inputs"), "{label: (prepare, run)}: the steps timed apart"),
    "traffic": (False, ("sizes", "dtype"), "bytes moved: gives GB/s"),
    "flops": (False, ("sizes",), "floating-point operations: gives GFLOP/s"),
    "output_like": (False, ("...",), "the outputs' shapes, for poisoning"),
    "from_stdout": (False, ("text", "..."), "the output, from what the kernel printed"),
    "extra": (False, ("ops", "variant", "inputs"), "more verdicts, e.g. gradcheck"),
    "probe": (False, ("inputs", "dtype", "gen"), "the main inputs, changed where position matters"),
    "update": (False, ("ref", "where", "old", "new", "..."),
               "the reference once the data changed at flat places `where` from old to new (linear in the data)"),
}
CONSTANTS = ("BASELINE", "BASELINES", "OUTPUTS", "WALL_CLOCK")


@dataclass(frozen=True)
class Spec:
    """What the engine needs from a family, every optional hook filled in with its default."""

    family: str
    make_inputs: Callable
    reference: Callable
    tolerance: Callable
    call: Callable
    function: Callable  # (ops, variant) -> fn(*inputs), the call that is timed
    timings: Callable  # (fn, inputs) -> {label: (prepare, run)}
    baselines: dict  # name -> fn(*inputs): what kplay times the kernel against ("torch.sum")
    traffic: Callable | None  # None: no GB/s
    flops: Callable | None  # None: no GFLOP/s
    output_like: Callable | None
    from_stdout: Callable | None
    extra: Callable
    probe: Callable | None  # also checked at the requested size: catches a kernel that skips part of its input
    update: Callable | None  # the reference after the timing changed a few elements of the data (None: computed again)
    outputs: tuple[str, ...]  # names of the outputs, for the mismatch report
    wall_clock: bool  # tiny ops: on a GPU, also time each call on a synchronized wall clock


def tolerance_for(spec, inputs, dtype, math: str = "") -> tuple:
    """The spec's (atol, where it comes from) for a variant: math is its arithmetic where not its dtype's
    (task.toml's math = "tf32"); only then is the hook asked with math=."""
    return spec.tolerance(*inputs, dtype, math=math) if math else spec.tolerance(*inputs, dtype)


def one_step(fn, inputs) -> dict:
    """The default timing: the whole call, one step."""
    return {"call": (tuple, lambda: fn(*inputs))}


_modules: dict = {}
_specs: dict = {}


def module(fam: Family):
    """The family's spec.py as a module, imported by path once per version (it may keep state)."""
    path = fam.path / "spec.py"
    try:
        key = (str(path), path.stat().st_mtime_ns)
    except OSError:
        raise UsageError(f"{fam.name}: {path} does not exist (a family needs a spec.py)") from None
    if key not in _modules:
        found = importlib.util.spec_from_file_location(f"kplay_spec_{fam.name}", path)
        mod = importlib.util.module_from_spec(found)
        try:
            found.loader.exec_module(mod)
        except SyntaxError as e:
            raise UsageError(f"{path}:{e.lineno}: {e.msg}") from None
        except ModuleNotFoundError as e:
            if (e.name or "").startswith("playground."):  # a folder ejected by an older kplay, whose modules moved
                raise UsageError(f"{path} imports {e.name}, which this kplay no longer has: eject the family again "
                                 f"(kplay eject {fam.name} NEW-DIR) and copy your edits into it") from None
            raise _broken(path, e) from e
        except Exception as e:  # raised while spec.py runs: its own line, not importlib's
            raise _broken(path, e) from e  # KPLAY_DEBUG=1: where it was
        _modules[key] = mod
    return _modules[key]


def _broken(path, e: Exception, hook: str = "") -> UsageError:
    """'spec.py:12: reference raised ValueError: ...': the line in spec.py where it went wrong."""
    line = next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__)) if f.filename == str(path)), "?")
    first = (str(e).splitlines() or [""])[0]
    return UsageError(f"{path}:{line}: {hook + ' raised ' if hook else ''}{type(e).__name__}: {first}")


def _own(path, hook: str, fn: Callable | None) -> Callable | None:
    """A hook that runs only the spec's own code (not the kernel): an error in it is a broken spec.py, exit 2."""
    if fn is None:
        return None

    def guarded(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError:
            raise
        except Exception as e:
            if "out of memory" in str(e).lower():  # the machine's limit, not the spec's mistake
                raise
            raise _broken(path, e, hook) from e

    return guarded


def load(fam: Family) -> Spec:
    """The family's checked Spec."""
    mod = module(fam)
    if id(mod) not in _specs:
        _specs[id(mod)] = from_module(fam.name, mod, fam.baselines)
    maths = [v.name for v in fam.variants.values() if v.math]
    if maths and "math" not in inspect.signature(mod.tolerance).parameters:
        raise UsageError(f"{fam.name}: {maths[0]} sets math in task.toml, so spec.py's tolerance must take math=")
    return _specs[id(mod)]


def from_module(family: str, module, declared: tuple[str, ...] = ()) -> Spec:
    """Check the hooks a module defines and derive the rest; declared: the baselines task.toml names."""
    hooks = {name: getattr(module, name) for name in HOOKS if callable(getattr(module, name, None))}
    _near_misses(family, module, hooks)
    for name, (required, args, what) in HOOKS.items():
        if name in hooks:
            _check_signature(family, name, hooks[name], args)
        elif required:
            raise UsageError(f"{family}: spec.py has no {name}({_shown(args)}): {what}")
    call = hooks["call"]
    own = {h: _own(getattr(module, "__file__", "spec.py"), h, hooks.get(h))
           for h in ("reference", "tolerance", "probe", "output_like", "update")}  # the spec's code alone, not the kernel
    return Spec(
        family=family, make_inputs=hooks["make_inputs"], reference=own["reference"],
        tolerance=own["tolerance"], call=call,
        function=hooks.get("function", lambda ops, variant: lambda *inputs: call(ops, variant, *inputs)),
        timings=hooks.get("timings", one_step), baselines=_baselines(family, module, hooks, declared),
        traffic=hooks.get("traffic"), flops=hooks.get("flops"), output_like=own["output_like"],
        from_stdout=hooks.get("from_stdout"), extra=hooks.get("extra", lambda ops, variant, inputs: {}),
        probe=own["probe"], update=own["update"],
        outputs=tuple(getattr(module, "OUTPUTS", ())), wall_clock=bool(getattr(module, "WALL_CLOCK", False)),
    )


def _baselines(family: str, module, hooks: dict, declared: tuple[str, ...]) -> dict:
    """BASELINES = {name: fn}, or baseline() named BASELINE (default "PyTorch"), or none: the names task.toml
    declares (the CLI checks --baseline against those before torch loads), in its order."""
    table = getattr(module, "BASELINES", None)
    if table is not None:
        if "baseline" in hooks or not isinstance(table, dict) or not all(map(callable, table.values())):
            raise UsageError(f"{family}: spec.py's BASELINES must be {{name: function}}, and then no baseline()")
    elif "baseline" in hooks:
        table = {getattr(module, "BASELINE", "PyTorch"): hooks["baseline"]}
    bound = list(table or {})
    if sorted(bound) != sorted(declared):
        raise UsageError(f"{family}: task.toml declares baselines = {json.dumps(list(declared))} but spec.py binds "
                         f"{json.dumps(bound)}: name the same baselines in both")
    return {name: table[name] for name in declared}


def _check_signature(family: str, name: str, fn, args: tuple) -> None:
    """The hook must take the arguments the engine passes ("..." stands for the inputs, at least one)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C function: nothing to check
    bind = signature.bind_partial if "..." in args else signature.bind
    try:
        bind(*[None] * len(args))
    except TypeError:
        raise UsageError(f"{family}: spec.py's {name}{signature} must accept ({_shown(args)})") from None


def _shown(args: tuple) -> str:
    return ", ".join("*inputs" if a == "..." else a for a in args)


def _near_misses(family: str, module, hooks: dict) -> None:
    """A public function within two letters of a hook the spec lacks ('tolerence') is a typo (one letter for a
    short hook: 'extract' is not 'extra'); upper-case names are compared with the constants."""
    missing = [h for h in [*HOOKS, *CONSTANTS] if h not in hooks and not hasattr(module, h)]
    for name, value in vars(module).items():
        imported = inspect.ismodule(value) or callable(value) and getattr(value, "__module__", "") != module.__name__
        if name.startswith("_") or imported or name in HOOKS or name in CONSTANTS or inspect.isclass(value):
            continue
        kind = CONSTANTS if name.isupper() else HOOKS if inspect.isfunction(value) else ()
        close = [h for h in missing if h in kind and _distance(name, h) <= min(2, len(h) // 4)]
        if close:
            raise UsageError(f"{family}: spec.py defines '{name}': did you mean '{close[0]}'?")


def _distance(a: str, b: str) -> int:
    """Levenshtein distance: edits that turn a into b."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]
