"""Sweeps: one size over a range, each point a whole `kplay run` (check and timing) in its own child.

One child per point, not one for the whole sweep: a point costs what `kplay run` costs, so its
timeout, its crash verdict and its out-of-memory note are the run's own, and an OOM-killed point
does not take the rest of the sweep with it. The price is one `import torch` per point (2.4 s on
the 2-core box); the builds come from the cache.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

from . import isolate, registry, runner
from .errors import KplayError, UsageError

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
        return _checked(sorted({runner.parse_size("sizes", t) for t in items}))
    span, _, step = text.partition(":")
    bounds = span.split("..")
    if len(bounds) != 2 or not all(bounds) or "..." in span or (step and step[0] not in "xX×"):
        raise UsageError(f"--sizes {text}: expected FIRST..LAST or FIRST..LAST:xFACTOR, e.g. 1e3..1e9:x2")
    first, last = (runner.parse_size("sizes", b) for b in bounds)
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
    chosen = sizes or (table.get("sizes") if mine else None)
    values = parse_sizes(chosen) if chosen else default_sizes(runner.parse_size(key, fam.sizes[key]))
    return Sweep(key, tied, tuple(values))


def requests(base: dict, sweep: Sweep) -> list[dict]:
    """One `kplay run` request per point; every one is validated here, before any child starts."""
    fixed = dict(base.get("sizes") or {})
    for k in (sweep.key, *sweep.tie):
        if k in fixed:
            raise UsageError(f"--size {k}=...: {k} is swept; set its values with --sizes")
    points = [{**base, "sizes": {**fixed, **{k: n for k in (sweep.key, *sweep.tie)}}} for n in sweep.sizes]
    for r in points:
        runner.plan(**r)
    return points


def run(points: list[dict], timeout: float, on_point=lambda k, request: None,
        on_event=lambda *a, **k: None) -> tuple[list[dict], KplayError | None]:
    """Run the points in order: (records, the error that stopped the sweep or None).

    A point that does not fit in memory becomes a record with a "skipped" note and the sweep goes
    on; any other error stops it with the exit code `kplay run` gives (crash 4, build 3, usage 2).
    """
    records = []
    for k, request in enumerate(points):
        on_point(k, request)
        try:
            records.append(isolate.run(request, timeout, on_event))
        except KplayError as e:
            if not _out_of_memory(str(e)):
                return records, e
            plan = runner.plan(**{k: v for k, v in request.items() if k != "compile_baseline"})
            records.append({"family": plan.family.name, "device": request["device"], "sizes": plan.sizes, "skipped": str(e)})
    return records, None


def _out_of_memory(message: str) -> bool:
    """The input allocation, the kernel or the OOM killer ran out; not "illegal memory access"."""
    return any(s in message.lower() for s in ("out of memory", "not enough memory"))


# ---- what the table, the chart, the plot and the CSV show -------------------------------------------------

BASELINE = "PyTorch"


def metric(records: list[dict]) -> tuple[str, str]:
    """(field, label): GB/s when the family gives its traffic, else GFLOP/s, else the time."""
    timed = [r for r in records if "skipped" not in r]
    for field, label in (("gbps", "GB/s"), ("gflops", "GFLOP/s")):
        if any(r[f"baseline_{field}"] is not None or any(v[field] for v in r["variants"]) for r in timed):
            return field, label
    return "time", "time (s)"


def axis(records: list[dict], key: str) -> tuple[str, dict]:
    """('batch=in=out', {other sizes}): the swept size with the sizes tied to it, and the fixed ones."""
    sizes = [r["sizes"] for r in records]
    moving = [k for k in sizes[0] if k == key or any(s[k] != sizes[0][k] for s in sizes)]
    return "=".join(moving), {k: v for k, v in sizes[0].items() if k not in moving}


def series(records: list[dict], key: str, field: str) -> dict[str, list[tuple[int, float]]]:
    """{variant or "PyTorch": [(size, value), ...]} in sweep order; points without a number left out."""
    out: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if "skipped" in r:
            continue
        n = r["sizes"][key]
        for v in r["variants"]:
            value = v["time"]["median_s"] if field == "time" and v["time"] else v.get(field)
            if value is not None:
                out.setdefault(v["variant"], []).append((n, value))
        base = r["baseline"]["median_s"] if field == "time" and r["baseline"] else r.get(f"baseline_{field}")
        if base is not None:
            out.setdefault(BASELINE, []).append((n, base))
    if BASELINE in out:  # the reference last: it is the line to beat
        out[BASELINE] = out.pop(BASELINE)
    return out


COLUMNS = ["variant", "check", "max_abs_err", "tolerance", "median_s", "q1_s", "q3_s", "samples",
           "gbps", "gflops", "pct_peak", "speedup", "peak_gbps", "note"]


def rows(records: list[dict]) -> list[dict]:
    """One flat row per (size, variant), the PyTorch reference as its own variant: what --csv writes."""
    out = []
    for r in records:
        head = {"family": r["family"], "device": r.get("device", ""), "dtype": r.get("dtype", ""), **r["sizes"]}
        if "skipped" in r:
            out.append({**head, "note": r["skipped"]})
            continue
        for v in r["variants"]:
            c, t = v["check"], v["time"] or {}
            out.append({**head, "variant": v["variant"], "check": "PASS" if c["ok"] else "FAIL",
                        "max_abs_err": c["max_abs_err"], "tolerance": c["tolerance"],
                        **{k: t.get(k) for k in ("median_s", "q1_s", "q3_s", "samples")},
                        "gbps": v["gbps"], "gflops": v["gflops"], "pct_peak": v["pct_peak"],
                        "speedup": v["speedup"], "peak_gbps": r["peak_gbps"]})
        if r["baseline"]:
            b = r["baseline"]
            pct = r["baseline_gbps"] and r["peak_gbps"] and 100 * r["baseline_gbps"] / r["peak_gbps"]
            out.append({**head, "variant": BASELINE, **{k: b[k] for k in ("median_s", "q1_s", "q3_s", "samples")},
                        "gbps": r["baseline_gbps"], "gflops": r["baseline_gflops"], "pct_peak": pct,
                        "speedup": 1.0, "peak_gbps": r["peak_gbps"]})
    return out


def write_csv(records: list[dict], path: str) -> None:
    table = rows(records)
    sizes = list(dict.fromkeys(k for r in records for k in r["sizes"]))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, ["family", "device", "dtype", *sizes, *COLUMNS], restval="")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in table)
