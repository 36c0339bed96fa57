"""Sweeps: one size over a range, each point a whole `kplay run` (check and timing) in its own child.

One child per point, not one for the whole sweep: a point costs what `kplay run` costs, so its
timeout, its crash verdict and its out-of-memory note are the run's own, and an OOM-killed point
does not take the rest of the sweep with it. The price is one `import torch` per point (2.4 s on
the 2-core box); the builds come from the cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..child import spawn as isolate
from ..core import events
from ..core.errors import KplayError, UsageError
from ..family import registry
from ..family.request import Request, parse_size

MAX_POINTS = 64


@dataclass(frozen=True)
class Sweep:
    key: str  # the size that varies
    tie: tuple[str, ...]  # sizes that take the same value (linear: in and out follow batch)
    sizes: tuple[int, ...]


def parse_sizes(text: str) -> list[int]:
    """'1e3,1e4' (a list), '1e3..1e9' (powers of ten) or '1e3..1e9:x2' (factor steps) -> sorted sizes."""
    text = str(text).replace(" ", "")
    if ".." not in text:
        items = [t for t in text.split(",") if t]
        if not items:
            raise UsageError("--sizes: give a list (1e3,1e4) or a range (1e3..1e9, 1e3..1e9:x2)")
        return _checked(sorted({parse_size("sizes", t) for t in items}))
    span, _, step = text.partition(":")
    bounds = span.split("..")
    if len(bounds) != 2 or not all(bounds) or "..." in span or (step and step[0] not in "xX×"):
        raise UsageError(f"--sizes {text}: expected FIRST..LAST or FIRST..LAST:xFACTOR, e.g. 1e3..1e9:x2")
    first, last = (parse_size("sizes", b) for b in bounds)
    try:
        factor = float(step[1:]) if step else 10.0
    except ValueError:
        raise UsageError(f"--sizes {text}: the step {step} is not a number") from None
    if last < first:
        raise UsageError(f"--sizes {text}: the range must go up ({last:,} < {first:,})")
    if not factor > 1:
        raise UsageError(f"--sizes {text}: the step must be a factor above 1, e.g. x2")
    return _checked(_geometric(first, last, factor))


def _geometric(first: int, last: int, factor: float) -> list[int]:
    count = math.floor(math.log(last / first, factor) + 1e-9) + 1
    if count > MAX_POINTS:  # refuse before building a huge list (1..1e12:x1.0001)
        raise UsageError(f"--sizes: {count:,} points, at most {MAX_POINTS}: take a larger step")
    return sorted({round(first * factor**k) for k in range(count)})


def _checked(sizes: list[int]) -> list[int]:
    if len(sizes) > MAX_POINTS:
        raise UsageError(f"--sizes: {len(sizes)} points, at most {MAX_POINTS}: take a larger step")
    return sizes


def default_sizes(default: int) -> list[int]:
    """Without --sizes or [bench] sizes: powers of ten around a large default, factors of 2 around a small one."""
    if default >= 10_000:  # sum: n = 1e7 -> 1e3 .. 1e8, from cache-resident to memory-bound
        low = 10 ** max(0, round(math.log10(default)) - 4)
        return _geometric(low, low * 10**5, 10)
    return _geometric(max(1, default // 64), 4 * default, 2)  # lltm batch 16 -> 1 .. 64


def settings(fam: registry.Family, over: str | None = None, tie: list[str] | None = None,
             sizes: str | None = None) -> Sweep:
    """What to sweep: the options first, then the family's [bench] table, then its first size."""
    table = fam.bench if isinstance(fam.bench, dict) else {}  # `[bench]` in task.toml; `bench = false`: no timing
    if not fam.bench:
        raise UsageError(f"{fam.name} is not timed (bench = false in its task.toml): nothing to sweep")
    if not fam.sizes:
        raise UsageError(f"{fam.name} declares no size to sweep")
    own = table.get("size") or next(iter(fam.sizes))
    key = over or own
    mine = key == own  # the table's tie and sizes belong to its own size
    tied = tuple(tie if tie is not None else table.get("tie", ()) if mine else ())
    for k in (key, *tied):
        if k not in fam.sizes:
            raise UsageError(f"--over/--tie {k}: {fam.name} has no size '{k}'; it has {', '.join(fam.sizes)}")
    if key in tied:
        raise UsageError(f"--tie {key}: that is the swept size itself")
    if sizes is not None and not sizes.strip():
        raise UsageError("--sizes: give the sizes to sweep, e.g. 1e3,1e4,1e5 or 1e3..1e9")
    chosen = sizes or (table.get("sizes") if mine else None)
    values = parse_sizes(chosen) if chosen else default_sizes(parse_size(key, fam.sizes[key]))
    return Sweep(key, tied, tuple(values))


def requests(base: Request, sweep: Sweep, fixed: dict) -> list[Request]:
    """One `kplay run` request per point (the first baseline only, unless --baseline says), all validated now."""
    for k in (sweep.key, *sweep.tie):
        if k in fixed:
            raise UsageError(f"--size {k}=...: {k} is swept; set its values with --sizes")
    return [base.with_sizes({k: n for k in (sweep.key, *sweep.tie)}) for n in sweep.sizes]


def run(points: list[Request], on_point=lambda k, request: None,
        on_event=events.ignore) -> tuple[list[dict], KplayError | None]:
    """Run the points in order: (records, the error that stopped the sweep or None).

    A point that does not fit in memory becomes a record with a "skipped" note and the sweep goes
    on; any other error stops it with the exit code `kplay run` gives (crash 4, build 3, usage 2).
    """
    records = []
    with isolate.warm():  # every point forks from one worker that has imported torch
        for k, request in enumerate(points):
            on_point(k, request)
            try:
                records.append(isolate.run(request, on_event))
            except KplayError as e:
                if not _out_of_memory(str(e)):
                    return records, e
                records.append({"family": request.family, "device": request.device, "sizes": request.sizes,
                                "skipped": str(e)})
    return records, None


def _out_of_memory(message: str) -> bool:
    """The input allocation, the kernel or the OOM killer ran out; not "illegal memory access"."""
    return any(s in message.lower() for s in ("out of memory", "not enough memory"))
