"""One request: what the user asked for, validated once against the family's task.toml, without torch.

The CLI makes it, the child process gets it as JSON, the runner and the sweep read it; nobody
validates it again.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import struct
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Collection

from ..core.errors import UsageError
from . import registry

MAX_SIZE = 1 << 40
MAX_SEED = 1 << 62  # torch.Generator takes a signed 64-bit seed; the timed inputs use seed + 1000 + k
MAX_TIMEOUT_S = 86_400
DTYPES = registry.DTYPES
INT_RANGE = {"int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1)}
FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
             "float64": 1.7976931348623157e308}
DEVICES = ("auto", *registry.DEVICES)


@dataclass(frozen=True)
class Request:
    family: str  # the family's name
    path: str  # its folder
    device: str = "auto"  # auto, cpu or cuda
    variant: str | None = None  # a name, "all", or None for the family's default
    dtype: str = "float32"
    seed: int = 0
    sizes: dict = field(default_factory=dict)  # every size (ints), plus "values" where the family declares it
    params: dict = field(default_factory=dict)  # the family's parameters (defaults filled in), the variants' own given
    bench: bool = True  # time it (false: check only)
    baselines: tuple[str, ...] = ()  # only these baselines (empty: all of the family's)
    skip_baselines: tuple[str, ...] = ()
    one_baseline: bool = False  # only the family's first baseline, unless `baselines` names some (a sweep)
    timeout: float = 120.0  # seconds the kernel may run, counted after the builds
    budget_s: float = 0.3  # timing budget per contender (make: $KPLAY_BUDGET_S, or BUDGET_S)
    warnings: tuple[str, ...] = ()  # things the user should know, e.g. a value held approximately
    given_params: tuple[str, ...] = ()  # the parameters the user set (a warning if no chosen variant uses one)
    lineinfo: bool = False  # a sanitized run (every CUDA build has -lineinfo: its findings have file and line)
    mode: str = "run"  # run; profile (torch.profiler around one call); nvtx (that call in an NVTX range, for ncu)
    read_only: bool = True  # on the CPU, the checked inputs are read-only (a write faults); off for a rerun
    test_sizes: tuple | None = None  # checked before the requested size (None: the family's own)
    own_dtypes: bool = False  # --variant all with no --dtype: a variant that lacks this dtype runs next in its own

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Request:
        raw = json.loads(text)
        tuples = {k: tuple(raw[k]) for k in ("baselines", "skip_baselines", "warnings", "given_params", "test_sizes")
                  if raw.get(k) is not None}
        return cls(**{**raw, **tuples})

    def load_family(self) -> registry.Family:
        return registry.load_family(Path(self.path))

    def with_sizes(self, sizes: dict) -> Request:
        """The same request at other sizes (a sweep's point), validated like the first."""
        fam = self.load_family()
        return dataclasses.replace(self, sizes=_sizes(fam, {**self.sizes, **sizes}, self.dtype)[0])


BUDGET_S = 0.3  # seconds of timing per contender, after its 30 samples; $KPLAY_BUDGET_S sets another


def _budget() -> float:
    text = os.environ.get("KPLAY_BUDGET_S", "")
    try:
        budget = float(text) if text else BUDGET_S
    except ValueError:
        budget = -1.0
    if not 0 < budget <= 60:
        raise UsageError(f"KPLAY_BUDGET_S={text}: give seconds of timing per contender, above 0 and at most 60")
    return budget


def make(name: str, *, device: str = "auto", variant: str | None = None, dtype: str | None = None, seed: int = 0,
         sizes: dict | None = None, params: dict | list | None = None, paths: list[str] | None = None,
         bench: bool = True, baselines=(), skip_baselines=(), one_baseline: bool = False, timeout: float = 120.0,
         budget_s: float | None = None, lineinfo: bool = False, mode: str = "run", options: Collection[str] = ()) -> Request:
    """Check a request against the family's task.toml; every mistake is a UsageError naming what was typed.

    options: the CLI's own long options, from Click (a size may not take one's name; a typo of one gets a
    did-you-mean); the CLI passes them, so this module never imports it.
    """
    fam = registry.find(name, paths)
    if registry.clash(fam, options):
        raise UsageError(registry.clash(fam, options))
    if device not in DEVICES:
        raise UsageError(f"--device {device}: valid: {', '.join(DEVICES)}")
    named = fam.variants.get(variant)  # one named outright: its own first dtype by default, and it must take it
    given = dtype is not None
    dtype = _dtype(fam, dtype or (fam.dtypes_of(named)[0] if named else None))
    if named:
        fam.takes(named, dtype)
    full, warnings = _sizes(fam, dict(sizes or {}), dtype, options)
    shadowing = "" if registry.is_path(name) else registry.shadowing(fam)  # a folder named outright shadows nothing
    warnings = [w for w in [shadowing] if w] + warnings
    pairs = [f"{k}={v}" for k, v in params.items()] if isinstance(params, dict) else list(params or [])
    values = fam.parse_params(pairs, candidates(fam, device, variant))  # a combination refused: one line, no build
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise UsageError(f"--timeout {timeout:g}: give a number of seconds above 0, at most {MAX_TIMEOUT_S:,} (a day)")
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed {seed}: give a whole number from 0 to 2^62")
    budget_s = _budget() if budget_s is None else budget_s
    _baselines(fam, baselines, skip_baselines)
    return Request(fam.name, str(fam.path), device, variant, dtype, seed, full, values, bench,
                   tuple(baselines), tuple(skip_baselines), one_baseline, timeout, budget_s, tuple(warnings),
                   tuple(p.partition("=")[0] for p in pairs), lineinfo, mode, own_dtypes=variant == "all" and not given)


def candidates(fam: registry.Family, device: str, variant: str | None) -> list[registry.Variant]:
    """The variants the run may choose, known before torch says whether there is a GPU: with device auto, a
    variant by name, every one for 'all', and each device's default for none."""
    if device != "auto":
        return fam.pick_variants(device, variant)
    if variant:
        return fam.named(variant)
    return list({v.name: v for d in fam.devices for v in fam.pick_variants(d, None)}.values())


def _baselines(fam: registry.Family, chosen, skipped) -> None:
    """--baseline and --skip-baseline name baselines task.toml declares (spec.py, which imports torch, binds them)."""
    for option, name in [*(("--baseline", b) for b in chosen), *(("--skip-baseline", b) for b in skipped)]:
        if name not in fam.baselines:
            close = difflib.get_close_matches(name, fam.baselines, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise UsageError(f"{option} {name}: {fam.name} has no such baseline; {hint}"
                             f"it has {', '.join(fam.baselines) or 'none'}")


def _dtype(fam: registry.Family, dtype: str | None) -> str:
    dtype = dtype or fam.dtypes[0]
    if dtype not in fam.dtypes:
        what = "" if dtype in DTYPES else "unknown dtype; "
        raise UsageError(f"--dtype {dtype}: {what}{fam.name} takes {', '.join(fam.dtypes)}")
    return dtype


def _sizes(fam: registry.Family, given: dict, dtype: str, options: Collection[str] = ()) -> tuple[dict, list[str]]:
    """Every size of the family, parsed, the given ones ({name: text}; None: no value) in place of the defaults;
    then the values."""
    for key, text in given.items():
        if key not in fam.sizes and not (key == "values" and fam.values):
            raise UsageError(unknown_size(fam, key, options))
        if text is None:
            raise UsageError(f"--{key} needs a value, e.g. --{key} {'4,3,2,1' if key == 'values' else 1000}")
    full = {k: parse_size(k, given.get(k, v)) for k, v in fam.sizes.items()}
    warnings = []
    if "values" in given:
        full["values"], warnings = parse_values(given["values"], dtype)
        full[fam.values["size"]] = len(full["values"])
    for key, most in fam.size_max.items():
        if full[key] > most:
            what = "--values: more than" if "values" in given and key == fam.values["size"] else f"--{key} {given[key]}: above"
            raise UsageError(f"{what} {fam.name}'s largest {key}, {most:,}")
    return full, warnings


def unknown_size(fam: registry.Family, key: str, options: Collection[str] = ()) -> str:
    """'--rows does not apply to sum; it takes --n' (with a did-you-mean when one is close)."""
    if key in options:  # an option of another command (`kplay bench --explain`): Click took this command's own
        return f"--{key} is not an option of this command (its --help lists them)"
    names = [*fam.sizes, *(["values"] if fam.values else [])]
    close = difflib.get_close_matches(key, [*names, *options], n=1)  # `--timout 3` is a typo, not a size
    hint = f"; did you mean --{close[0]}?" if close else ""
    takes = ", ".join(f"--{k}" for k in names) or "no size"
    return f"--{key} does not apply to {fam.name}{hint} ({fam.name} takes {takes})"


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


def parse_values(text, dtype: str) -> tuple[list, list[str]]:
    """'4,3,2,1' -> [4, 3, 2, 1] for the dtype; a value it cannot hold is an error, one it rounds a warning."""
    items = [str(t).strip() for t in text] if isinstance(text, list) else str(text).split(",")
    if not any(items):
        raise UsageError("--values: give at least one number, e.g. 4,3,2,1")
    if not all(items):
        raise UsageError(f"--values {text}: an empty item between commas")
    values, warnings = [], []
    for item in items:
        value, note = _value(item, dtype)
        values.append(value)
        warnings += [note] if note else []
    return values, warnings


def _value(item: str, dtype: str) -> tuple[int | float, str]:
    """One value for the dtype, and a note when it is held only approximately."""
    try:
        exact = Decimal(item)
    except InvalidOperation:
        raise UsageError(f"--values {item}: not a number") from None
    if exact.is_snan():
        raise UsageError(f"--values {item}: a signalling NaN; write nan")
    if dtype in INT_RANGE:
        low, high = INT_RANGE[dtype]
        if not exact.is_finite() or exact != exact.to_integral_value():
            raise UsageError(f"--values {item}: {dtype} holds whole numbers only")
        if not low <= exact <= high:
            raise UsageError(f"--values {item}: {dtype} holds {low:,} to {high:,}")
        return int(exact), ""
    if exact.is_finite() and abs(exact) > Decimal(FLOAT_MAX[dtype]):
        raise UsageError(f"--values {item}: too large for {dtype} (its largest is {FLOAT_MAX[dtype]:.4g})")
    held = _round(float(exact), dtype)
    if exact.is_finite() and Decimal(_shortest(held, dtype)) != exact:
        return held, f"--values {item}: {dtype} holds it as {_shortest(held, dtype)}"
    return held, ""


def _round(x: float, dtype: str) -> float:
    """x rounded to the dtype, in pure Python (no torch here)."""
    if abs(x) > FLOAT_MAX[dtype]:
        return math.copysign(math.inf, x)
    if dtype == "float32":
        return struct.unpack("f", struct.pack("f", x))[0]
    if dtype == "float16":
        return struct.unpack("e", struct.pack("e", x))[0]
    if dtype == "bfloat16" and math.isfinite(x):  # the top 16 bits of the float32, rounded to nearest even
        bits = struct.unpack("I", struct.pack("f", x))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return struct.unpack("f", struct.pack("I", bits))[0]
    return x


def _shortest(x: float, dtype: str) -> str:
    """The fewest digits that give back x in the dtype: 0.1 for float32's 0.100000001."""
    for digits in range(1, 18):
        text = f"{x:.{digits}g}"
        if _round(float(text), dtype) == x:
            return text
    return repr(x)


def split_sizes(args: list[str], pairs: list[str] | None) -> dict:
    """`--n 1e7`, `--rows=1e5` (the words a command did not declare itself) and `--size n=1e7`, as {name: text}
    (None: a name without its value). Only split here: make() checks the names and the values."""
    sizes, rest = {}, list(args)

    def given(key: str, value) -> None:
        if key in sizes:
            raise UsageError(f"--{key} is given twice ({sizes[key]} and {value}): give it once")
        sizes[key] = value

    while rest:
        arg = rest.pop(0)
        if not arg.startswith("--") or len(arg) < 3:
            raise UsageError(f"unexpected argument '{arg}' (sizes are given as --NAME VALUE)")
        key, eq, value = arg[2:].partition("=")
        given(key, value if eq else rest.pop(0) if rest and not rest[0].startswith("--") else None)
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--size {pair}: expected NAME=VALUE")
        given(key, value)
    return sizes
