"""Rich renderables built from the result record's plain data (the same data --json prints).

Every table is built for an 80-column terminal: one row per contender (and per step, for families
timed in steps), the same cells in `kplay run` and `kplay bench`, made by one formatter (`_cells`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

MAX_STDOUT_LINES = 20
CALL_PATH_S = 10e-6  # below this, the call path (Python, dispatcher, allocation) is most of a call's time
BLOCKS = "▁▂▃▄▅▆▇█"
COLORS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _rate(x: float | None) -> str:
    """3 significant digits, without an exponent: 0.657, 46.1, 3,860."""
    return "-" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


# ---- the one row formatter ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """Which columns a table has; every row of it is made by _cells with the same shape."""

    check: bool  # check and error columns
    error: bool  # the max error ≤ tolerance column
    steps: bool  # a step column (forward, backward)
    rate: str  # "gbps", "gflops" or ""
    pct: bool  # % of the device's peak (GPU): of the ceiling that binds at the call's intensity
    baselines: tuple[str, ...]  # one speedup column per baseline


def _shape(records: list[dict]) -> Shape:
    done = [r for r in records if "skipped" not in r]
    contenders = [t for r in done for t in (*r["variants"], *r["baselines"].values())]
    rates = {r.get("rate") for r in done}
    rate = "gflops" if "gflops" in rates else "gbps" if "gbps" in rates else ""  # results.RunResult.rate
    steps = any(len(t["timings"]) > 1 for t in contenders)
    names = tuple(dict.fromkeys(b for r in done for b in r["baselines"]))
    return Shape(check=True, error=not steps, steps=steps, rate=rate,
                 pct=any(t["pct_peak"] is not None for t in contenders), baselines=names)


def _headers(shape: Shape) -> list[tuple[str, str]]:
    """(header, justify) of each column after the first."""
    cols = [("check", "left")] if shape.check else []
    cols += [("error ≤ tol", "right")] if shape.error else []
    cols += [("step", "left")] if shape.steps else []
    cols += [("time", "right"), ("±", "right")]
    cols += [({"gbps": "GB/s", "gflops": "GFLOP/s"}[shape.rate], "right")] if shape.rate else []
    cols += [("% peak", "right")] if shape.pct else []
    return cols + [(f"×{b}", "right") for b in shape.baselines]


def _table(shape: Shape, first: str, lead: tuple[str, ...] = ()) -> Table:
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    for header in (*lead, first):
        table.add_column(header, no_wrap=True)
    for header, justify in _headers(shape):  # PASS or FAIL is never cut, however narrow the terminal
        table.add_column(header, justify=justify, no_wrap=True, min_width=4 if header == "check" else None)
    return table


def _clock(t: dict) -> dict:
    """The step timings that count (results.Timed.clock: the wall clock where it was measured)."""
    return t[t.get("clock", "timings")]


def _cells(t: dict, step: str | None, shape: Shape, first_row: bool = True) -> list[str]:
    """One contender's row (a variant or a baseline), for one step or the whole call (step None)."""
    cells = []
    check = t.get("check")
    if shape.check:
        cells.append(_verdict(check) if check and first_row else "")
    if shape.error:
        cells.append(_error(check) if check and first_row else "")
    stats = t["time"] if step is None else _clock(t).get(step)
    if shape.steps:
        cells.append(step or "call")
    cells += [seconds(stats and stats["median_s"]), _spread(stats)]
    if shape.rate:  # the whole call's rate: on its own row where the call has steps
        cells.append(_rate(t[shape.rate]) if step is None else "")
    if shape.pct:
        cells.append(_num(t["pct_peak"], "{:.0f}%") if step is None else "")
    for name in shape.baselines:
        cells.append(_speedup(t.get("speedups", {}).get(name, {}).get(step or "call")))
    return cells


def _speedup(s: dict | None) -> str:
    """A baseline's time over this one's (results.Speedup): "same" within the noise."""
    if not s or s["ratio"] is None:
        return "-"
    return "same" if s["same"] else f"{s['ratio']:.2f}×"


def _verdict(check: dict) -> str:
    return "[green]PASS[/]" if check["ok"] else "[red]FAIL[/]"


def _error(check: dict) -> str:
    """The relation that holds: 0.00086 ≤ 24, 1.5 > 1.8e-07 (a FAIL within the tolerance failed another check,
    which its line names); no error where none could be measured (an output of the wrong shape or count)."""
    if check["max_abs_err"] is None:
        return "not compared"
    within = check["max_abs_err"] <= check["tolerance"]
    return f"{check['max_abs_err']:.2g} {'≤' if within else '>'} {check['tolerance']:.2g}"


def _spread(stats: dict | None) -> str:
    """The noise: the samples' relative standard deviation."""
    if not stats or not stats["median_s"]:
        return "-"
    return f"{100 * stats['noise']:.1f}%" if stats["noise"] < 0.1 else f"{100 * stats['noise']:.0f}%"


# ---- kplay run -----------------------------------------------------------------------------------------

def error_line(r: dict) -> Text:
    """A run that ended in an error (the follow-on dtype of --variant all): its dtype and the error's line."""
    return Text.assemble(("error", "red"), f" in the {r['dtype']} run: {r['error']}")


def run_report(r: dict, explain: bool = False, compact: bool = False) -> Group:
    """The title, the verdict table of one run, then what the checker found (compact: without the notes on
    how it was checked and timed, for kplay watch)."""
    shape = _shape([r])
    table = _table(shape, "variant")
    steps = list(_clock(next((t for t in (*r["variants"], *r["baselines"].values()) if t["timings"]), {"timings": {}, "walls": {}})))
    for t, who in [*((v, v["variant"]) for v in r["variants"]), *((b, f"[dim]{n}[/]") for n, b in r["baselines"].items())]:
        rows = [*steps, None] if shape.steps else [None]  # with steps, the call's row last: its time and rate
        for k, step in enumerate(rows):
            table.add_row(who if k == 0 else "", *_cells(t, step, shape, k == 0),
                          end_section=shape.steps and k == len(rows) - 1)
    notes = [Text(f"warning: {w}", style="yellow") for w in r.get("warnings", [])] + _waited(r) + _outcome(r) if compact else _notes(r)
    return Group(*_title(r), table, *kernel_lines(r), *vectorization(r, explain), *notes)


MAX_KERNELS = 4  # per contender; an ATen op launches many (lltm): the ones with the most GPU time, --json has all


def kernel_lines(r: dict, width: int = 80) -> list[Text]:
    """Each contender's CUDA kernels: one line each, and one more for the launch and its occupancy on a GPU.

    The build's part (ptxas: registers, static shared memory, spills, stack) is there without a GPU; on a
    GPU, the launch (threads × blocks, from the profiler) and its theoretical occupancy, with what limits it.
    """
    rows = [(v["variant"], v.get("kernels", [])) for v in r["variants"]]
    rows += [(name, b.get("kernels", [])) for name, b in r["baselines"].items()]
    rows = [(who, kernels) for who, kernels in rows if kernels]
    if not rows:
        return []
    every = [k for _, kernels in rows for k in kernels]
    gpu = next((k["occupancy"]["gpu"] for k in every if k.get("occupancy")), None)
    head = f"kernels launched by one call on {gpu}; occupancy is theoretical" if gpu else \
        f"kernels, from ptxas ({every[0].get('arch', '')})"
    out = [Text(head, style="dim")]
    who_width, name_width = max(len(who) for who, _ in rows), max(len(k["name"]) for k in every)
    indent = " " * (who_width + 1)  # under the name
    for who, kernels in rows:
        for k in _busiest(kernels):
            first = f"{who:<{who_width}} {k['name']:<{name_width}}  "
            for parts in filter(None, _kernel_parts(k)):
                out += [Text(line) for line in _wrapped(first, parts, indent, width)]
                first = indent
        if len(kernels) > MAX_KERNELS:
            out.append(Text(f"{indent}and {len(kernels) - MAX_KERNELS} more kernels (--json lists them)", style="dim"))
    return out


def _busiest(kernels: list[dict]) -> list[dict]:
    """The MAX_KERNELS kernels with the most GPU time (the first ones without a GPU), in launch order."""
    top = sorted(kernels, key=lambda k: -k["launch"]["gpu_s"] if k.get("launch") else 0)[:MAX_KERNELS]
    return [k for k in kernels if any(k is t for t in top)]


def _wrapped(first: str, parts: list[str], indent: str, width: int) -> list[str]:
    """'first' then the parts joined by ' · ', a new line (from `indent`) before a part that would pass `width`."""
    lines, sep = [first], ""
    for part in parts:
        if len(lines[-1]) + len(sep) + len(part) > width and lines[-1].strip():
            lines.append(indent)
            sep = ""
        lines[-1] += sep + part
        sep = " · "
    return lines


def _kernel_parts(k: dict) -> tuple[list[str], list[str]]:
    """(['12 regs', '1.0 KB smem', '0 spill'], ['256 thr × 390,625 blk (4 launches)', '8 blk/SM, occupancy 100% (warps)'])."""
    launch, occ = k.get("launch"), k.get("occupancy")
    regs = k.get("registers", launch and launch["registers"])
    built = [f"{regs} regs"] if regs is not None else []
    built.append(f"{_bytes(launch['shared'] if launch else k.get('shared_static', 0))} smem")
    if "spill_stores" in k:
        spills = (k["spill_stores"], k["spill_loads"])
        built.append("0 spill" if not any(spills) else f"spill {_bytes(spills[0])} st, {_bytes(spills[1])} ld")
    if k.get("stack"):
        built.append(f"{_bytes(k['stack'])} stack")
    if not launch:
        return built, []
    count = f" ({launch['count']} launches)" if launch["count"] > 1 else ""
    launched = [f"{_dims(launch['block'])} thr × {_dims(launch['grid'])} blk{count}"]
    if occ:
        launched.append(f"{occ['blocks_per_sm']} blk/SM, occupancy {occ['percent']:.0f}% ({occ['limit']})")
    return built, launched


def _bytes(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB" if n < 10 * 1024 else f"{n / 1024:.0f} KB"


def _dims(d: list | None) -> str:
    """[256, 1, 1] -> '256', [16, 16, 1] -> '16×16', [390625, 1, 1] -> '390,625'."""
    used = [n for n in (d or [1]) if n != 1] or [1]
    return "×".join(f"{n:,}" for n in used)


def _title(r: dict) -> list[Text]:
    """The run in one line (sizes, device, dtype, seed), the parameters in play on a second."""
    sizes = " ".join(f"{k}={v:,}" for k, v in r["sizes"].items() if isinstance(v, int))
    head = Text.from_markup(f"[b]{r['family']}[/b] · {r['device']} · {r['dtype']} · {sizes} · seed {r['seed']}")
    params = " · ".join(filter(None, [_pairs(r["params"]), *_own_params(r["variants"])]))
    return [head] + ([Text(f"params: {params}", style="dim")] if params else [])


def _pairs(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def _own_params(variants: list[dict]) -> list[str]:
    """Each variant's own parameters: as they are for a run of one variant, each named after its variant for more."""
    own = [(v["variant"], v.get("params") or {}) for v in variants]
    return [_pairs(p) if len(variants) == 1 else f"{name}: {_pairs(p)}" for name, p in own if p]


def _notes(r: dict) -> list:
    out = [Text(f"warning: {w}", style="yellow") for w in r.get("warnings", [])]
    first = r["variants"][0]
    c = first["check"]
    out.append(Text(f"checked at {'; '.join(_short_cases(c['cases']))}", style="dim"))
    out.append(Text(f"tolerance: {c['tolerance_source']}", style="dim"))
    for v in r["variants"]:
        if not _shape([r]).error:
            out.append(Text(f"{v['variant']}: max error {_error(v['check'])}", style="dim"))
        for key, value in v["extra"].items():
            out.append(Text(f"{v['variant']}: {key} {value}", style="dim" if value != "FAIL" else "red"))
    stats = first["time"] or next((b["time"] for b in r["baselines"].values()), None)
    if stats:
        inputs = f" on {r['inputs_timed']} copies changed before each call" if r.get("inputs_timed", 0) > 1 else ""
        out.append(Text(f"timing: {stats['method']}, {stats['samples']} samples, contenders taking turns{inputs}",
                        style="dim"))
        out += _waited(r) + _clocks(stats)
        out += _peak_notes(r)
        out.append(Text("±: noise (relative standard deviation); a speedup within it reads 'same'", style="dim"))
        if stats["median_s"] < CALL_PATH_S:
            out.append(Text(f"at under {seconds(CALL_PATH_S)} a call's time is mostly its path from Python through "
                            "the dispatcher, not the kernel's work", style="dim"))
    return out + _outcome(r)


WAITED_S = 0.1  # a wait for the device's lease shorter than this is not reported


def _waited(r: dict) -> list[Text]:
    """How long the timing waited for the device's lease, where it waited (another run was timing on it)."""
    lease = r.get("lease") or {}
    if lease.get("waited_s", 0) < WAITED_S:
        return []
    what = "the CPU" if lease["device"] == "cpu" else "the GPU"
    return [Text(f"waited {seconds(lease['waited_s'])} for {what}: another run was timing on it (the lease)",
                 style="dim")]


def _outcome(r: dict) -> list:
    """What each variant printed, the checker's mismatches, and the verdict line."""
    out = []
    for v in r["variants"]:
        out += _printed(v)
        out += [Text(f"✗ {v['variant']}: {m}", style="red") for m in v["check"]["mismatches"]]
        if v["variant"] in r.get("not_timed", ()):
            out.append(Text(f"{v['variant']}: not timed, as it failed the check", style="dim"))
    verdict = "[green b]PASS[/]" if r["ok"] else f"[red b]FAIL[/]: {r.get('why') or 'the check failed'}"
    return out + [Text.from_markup(verdict)]


def _peak_notes(r: dict) -> list[Text]:
    """What % peak is of: the ceiling that binds and each ceiling's arithmetic; the measured copy beside them."""
    if not r.get("bound"):
        return []
    src = r.get("peak_source", {})
    intensity = f", which binds at {_rate(r['flops'] / r['traffic'])} FLOP/byte" if r.get("flops") and r.get("traffic") else ""
    out = [f"% peak: of the {r['bound']} ceiling{intensity}",
           f"memory ceiling: {r['peak_gbps']:,.0f} GB/s = {src.get('bandwidth', '?')}"]
    if r.get("peak_gflops"):
        out.append(f"compute ceiling: {_rate(r['peak_gflops'])} GFLOP/s {r['dtype']} = {src.get(r['dtype'], '?')}")
    if src.get("tf32"):
        out.append(f"% peak of a TF32 variant: of the TF32 ceiling, {src['tf32']}")
    if r.get("copy_gbps"):
        out.append(f"copy: {r['copy_gbps']:,.0f} GB/s, a device-to-device copy measured here")
    return [Text(line, style="dim") for line in out]


def _short_cases(cases: list[str]) -> list[str]:
    """Each test size as what differs from the requested one: 'batch=1' for 'batch=1 features=32 ...'; the
    requested size last, with how else it was checked (2-D, strided, misaligned, probed, reused)."""
    main = next((c for c in cases if any(o.startswith(c + " ") for o in cases)), cases[-1])
    same = set(main.split())
    shown = [" ".join(p for p in c.split() if p not in same) or c for c in cases if not c.startswith(main)]
    also = [c.removeprefix(main + " ") for c in cases if c.startswith(main + " ")]
    listed = ", ".join(also[:-1]) + " and " + also[-1] if len(also) > 1 else "".join(also)
    last = main + (f" (also {listed})" if also else "")
    return [*shown, f"and {last}"] if shown else [last]


def _clocks(stats: dict) -> list[Text]:
    """The SM clock over the kept samples (NVML), and how many samples a throttled clock cost."""
    if not stats.get("clock_mhz"):
        return []
    low, mid, high = stats["clock_mhz"]
    dropped = f"; dropped {stats['dropped']} samples under 75% of max" if stats["dropped"] else ""
    held = f"{low:,} MHz throughout" if low == high else f"{low:,}–{high:,} MHz (median {mid:,})"
    return [Text(f"SM clock {held}{dropped}", style="dim")]


def _printed(v: dict) -> list:
    if not v["stdout"]:
        return []
    lines = v["stdout"].splitlines()
    more = f"\n… {len(lines) - MAX_STDOUT_LINES} more lines" if len(lines) > MAX_STDOUT_LINES else ""
    return [Panel("\n".join(lines[:MAX_STDOUT_LINES]) + more, title=f"{v['variant']} printed", title_align="left",
                  expand=False)]


def family_table(families: list[dict]) -> Table:
    """`kplay list`: a row per family; a variant marked * is an exercise (kplay start NAME/VARIANT DIR)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                  caption="* an exercise: kplay start NAME/VARIANT DIR" if any(f["exercises"] for f in families) else None,
                  caption_justify="left")
    for col in ("kernel", "summary", "variants", "devices"):
        table.add_column(col, ratio={"summary": 3, "variants": 2}.get(col), no_wrap=col in ("kernel", "devices"))
    for f in families:
        variants = ", ".join(v + "*" * (v in f["exercises"]) for v in f["variants"])
        table.add_row(f["name"], f["summary"], variants, ", ".join(f["devices"]))
    return table


def sizes_table(fam, variants=None) -> Table:
    """A family's sizes and parameters: the options `kplay run NAME` takes beyond the common ones; its variants'
    own parameters too, those of `variants` (default: all), one row for a parameter declared alike in several."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col in ("option", "default", "what"):
        table.add_column(col, no_wrap=col != "what")
    for name, default in fam.sizes.items():
        most = f" (at most {fam.size_max[name]:,})" if name in fam.size_max else ""
        table.add_row(f"--{name}", f"{default:,}", fam.size_help.get(name, "") + most)
    if fam.values:
        table.add_row("--values", "", fam.values.get("help", f"the input itself; its length sets --{fam.values['size']}"))
    for p, owners in [*((p, []) for p in fam.params.values()), *_own_param_rows(fam, variants)]:
        valid = ", ".join(map(str, p.choices)) if p.choices else f"{p.min}..{p.max}" if p.min is not None else ""
        whose = f"{', '.join(owners)}: " if owners else ""
        table.add_row(f"--param {p.name}=", str(p.default), whose + p.help + (f" ({valid})" if valid else ""))
    return table


def _own_param_rows(fam, variants=None) -> list[tuple]:
    """(Param, [variant names]) for the variants' own parameters, alike ones merged, in the order they come."""
    rows: dict = {}
    for v in variants if variants is not None else fam.variants.values():
        for p in v.params.values():
            rows.setdefault(p, []).append(v.name)
    return list(rows.items())


def checks_table(rows: list[tuple[str, bool, str]]) -> Table:
    table = Table(show_header=False, box=None)
    for what, ok, detail in rows:
        table.add_row("[green]OK[/]" if ok else "[red]FIX[/]", what, detail)
    return table


# ---- kplay bench: the sweep's table, chart, series and CSV ---------------------------------------------

def metric(records: list[dict]) -> tuple[str, str]:
    """(field, label): GB/s when the family gives its traffic, else GFLOP/s, else the time."""
    rate = _shape(records).rate
    return (rate, {"gbps": "GB/s", "gflops": "GFLOP/s"}[rate]) if rate else ("time", "time (s)")


def axis(records: list[dict], key: str) -> tuple[str, dict]:
    """('batch=in=out', {other sizes}): the swept size with the sizes tied to it, and the fixed ones."""
    sizes = [{k: v for k, v in r["sizes"].items() if isinstance(v, int)} for r in records]
    moving = [k for k in sizes[0] if k == key or any(s[k] != sizes[0][k] for s in sizes)]
    return "=".join(moving), {k: v for k, v in sizes[0].items() if k not in moving}


def baseline_names(records: list[dict]) -> list[str]:
    return list(dict.fromkeys(b for r in records if "skipped" not in r for b in r["baselines"]))


def series(records: list[dict], key: str, field: str) -> dict[str, list[tuple[int, float]]]:
    """{variant or baseline: [(size, value), ...]} in sweep order, the baselines last; no number, no point."""
    out: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if "skipped" in r:
            continue
        for name, t in [*((v["variant"], v) for v in r["variants"]), *r["baselines"].items()]:
            value = t["time"]["median_s"] if field == "time" and t["time"] else t.get(field)
            if value is not None:
                out.setdefault(name, []).append((r["sizes"][key], value))
    for name in baseline_names(records):  # the references last: the lines to beat
        if name in out:
            out[name] = out.pop(name)
    return out


def sweep_table(records: list[dict], key: str) -> Group:
    """Size x contender: check, time, throughput, speedup; a section per size, then the skipped points."""
    done = [r for r in records if "skipped" not in r]
    shape = _shape(records)
    shape = Shape(True, False, False, shape.rate, shape.pct, shape.baselines[:1])  # totals, vs the first baseline
    swept, fixed = axis(records, key)
    first = done[0] if done else {"family": records[0]["family"], "device": "", "dtype": ""}
    others = " ".join(f"{k}={v:,}" for k, v in fixed.items())
    title = Text.from_markup(f"[b]{first['family']}[/b] · {first['device']} · {first['dtype']} · {swept} swept"
                             + (f" · {others}" if others else ""))
    table = _table(shape, "variant", lead=(swept,))
    for r in records:
        size = f"{r['sizes'][key]:,}"
        if "skipped" in r:
            table.add_row(size, Text("skipped", style="yellow"), end_section=True)
            continue
        rows = [*((v["variant"], v) for v in r["variants"]), *((f"[dim]{n}[/]", b) for n, b in r["baselines"].items())]
        for k, (who, t) in enumerate(rows):
            table.add_row(size if k == 0 else "", who, *_cells(t, None, shape), end_section=k == len(rows) - 1)
    notes = [Text(f"{key}={r['sizes'][key]:,} skipped: {r['skipped']}", style="yellow") for r in records if "skipped" in r]
    return Group(title, table, *notes)


def short(n: int) -> str:
    """An axis label of a few characters: 1000 -> 1e3, 2048 -> 2048, 250000 -> 2.5e5."""
    if n < 10_000 and n != 1000:
        return str(n)
    mantissa, exp = f"{n:.1e}".split("e")  # rounds first: 99999 -> 1.0e+05, not 10e4
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exp)}"


def sweep_chart(records: list[dict], key: str) -> Group:
    """One sparkline per contender: the throughput (or time) at each size, on a common scale."""
    field, label = metric(records)
    lines = series(records, key, field)
    values = [v for points in lines.values() for _, v in points]
    if not values:
        return Group()
    ceiling = {"gbps": "peak_gbps", "gflops": "peak_gflops"}.get(field)
    peak = next((r[ceiling] for r in records if r.get(ceiling)), None) if ceiling else None
    low, high = min(values), max(values + [peak or 0])
    log = high / max(low, 1e-30) > 100  # six decades of GB/s on a GPU: a linear scale shows only the top
    sizes = sorted({n for points in lines.values() for n, _ in points})
    chart = Table(box=None, pad_edge=False, show_edge=False)
    chart.add_column("", no_wrap=True)
    for n in sizes:
        chart.add_column(short(n), justify="center", min_width=3, no_wrap=True)
    chart.add_column("best", justify="right", no_wrap=True)
    best = max if field != "time" else min
    bases = baseline_names(records)
    for i, (name, points) in enumerate(lines.items()):
        at = dict(points)
        color = "white" if name in bases else COLORS[i % len(COLORS)]
        cells = [_block(at[n], low, high, log, max(3, len(short(n)))) if n in at else "" for n in sizes]
        n, v = best(points, key=lambda p: p[1])
        chart.add_row(name, *(Text(c, style=color) for c in cells), f"{_value(v, field)} at {short(n)}")
    scale = "log scale" if log else "linear scale"
    top = f"{_value(high, field)}{' (device peak)' if peak and high == peak else ''}"
    head = Text(f"{label} against {axis(records, key)[0]} ({scale}: ▁ {_value(low, field)}, █ {top})", style="dim")
    return Group(head, chart)


def _block(value: float, low: float, high: float, log: bool, width: int) -> str:
    if high <= low:
        level = len(BLOCKS) - 1
    elif log:
        level = round((len(BLOCKS) - 1) * math.log(value / low) / math.log(high / low))
    else:
        level = max(0, math.ceil(len(BLOCKS) * value / high) - 1)
    return BLOCKS[level] * width


def _value(v: float, field: str) -> str:
    return seconds(v) if field == "time" else f"{_rate(v)} {'GB/s' if field == 'gbps' else 'GFLOP/s'}"


COLUMNS = ["variant", "baseline", "check", "max_abs_err", "tolerance", "median_s", "q1_s", "q3_s", "samples",
           "gbps", "gflops", "pct_peak", "speedup", "peak_gbps", "peak_gflops", "copy_gbps", "note"]


def csv_rows(records: list[dict]) -> list[dict]:
    """One flat row per (size, contender), each baseline as its own row: what --csv writes."""
    out = []
    for r in records:
        head = {"family": r["family"], "device": r.get("device", ""), "dtype": r.get("dtype", ""),
                **{k: v for k, v in r["sizes"].items() if isinstance(v, int)}}
        if "skipped" in r:
            out.append({**head, "note": r["skipped"]})
            continue
        first = next(iter(r["baselines"]), None)
        for name, t in [*((v["variant"], v) for v in r["variants"]), *r["baselines"].items()]:
            c, stats = t.get("check"), t["time"] or {}
            ratio = t["speedups"][first]["call"]["ratio"] if first and stats else None
            out.append({**head, "variant": name, "baseline": "" if c else "yes", "check": c and ("PASS" if c["ok"] else "FAIL"),
                        "max_abs_err": c and c["max_abs_err"], "tolerance": c and c["tolerance"],
                        **{k: stats.get(k) for k in ("median_s", "q1_s", "q3_s", "samples")},
                        "gbps": t["gbps"], "gflops": t["gflops"], "pct_peak": t["pct_peak"], "speedup": ratio,
                        "peak_gbps": r["peak_gbps"], "peak_gflops": r.get("peak_gflops"),
                        "copy_gbps": r.get("copy_gbps")})
    return out


def write_csv(records: list[dict], path: str) -> None:
    table = csv_rows(records)
    sizes = list(dict.fromkeys(k for r in records for k, v in r["sizes"].items() if isinstance(v, int)))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, ["family", "device", "dtype", *sizes, *COLUMNS], restval="")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in table)


# ---- kplay run --against ---------------------------------------------------------------------------------

def against_table(before: dict, after: dict) -> Group:
    """Each contender's median before and now, the ratio, and the verdict (compare.verdict)."""
    from ..run.compare import differences, rows

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    for header, justify in [("against before", "left"), ("before", "right"), ("±", "right"), ("now", "right"),
                            ("±", "right"), ("×", "right"), ("verdict", "left")]:
        table.add_column(header, justify=justify, no_wrap=True)
    style = {"faster": "green", "slower": "red", "same": "dim"}
    for name, old, new, word in rows(before, after):
        table.add_row(name, seconds(old["median_s"]), _spread(old), seconds(new["median_s"]), _spread(new),
                      f"{old['median_s'] / new['median_s']:.2f}×", f"[{style[word]}]{word}[/]")
    notes = [Text(f"warning: not like for like: {d}", style="yellow") for d in differences(before, after)]
    if not table.rows:
        return Group(*notes, Text("against before: no contender was timed in both runs", style="yellow"))
    rule = "same: the medians differ by less than the larger noise"
    return Group(table, *notes, Text(rule, style="dim"))


# ---- the C++ compiler's vectorization verdicts (kplay run, kplay show --asm) -----------------------------

FEW_LOOPS = 4  # up to this many loops, kplay run lists them; beyond, one line (--explain lists them)


def vectorization(r: dict, explain: bool = False) -> list[Text]:
    """Under the run's table: each variant's loops as its C++ compiler vectorized them, or one line per variant."""
    out = []
    for v in r["variants"]:
        loops = v["build"].get("loops") or []
        if explain or len(loops) <= FEW_LOOPS:
            out += [loop_line(loop, f"{v['variant']}: ") for loop in loops]
        else:
            files = ", ".join(dict.fromkeys(Path(loop["file"]).name for loop in loops))
            done = sum(loop["vectorized"] > 0 for loop in loops)
            out.append(Text(f"{v['variant']}: the compiler vectorized {done} of {len(loops)} loops in {files} "
                            "(--explain lists them)", style="dim"))
    return out


def loop_line(loop: dict, prefix: str = "") -> Text:
    """'sum.cpp:35 vectorized (using 32 byte vectors)', or why not."""
    verdict = loop_verdict(loop)
    return Text(f"{prefix}{Path(loop['file']).name}:{loop['line']} ", style=verdict.style) + verdict


def loop_verdict(loop: dict) -> Text:
    """'vectorized (using 32 byte vectors)', 'not vectorized: why', or both when the loop's copies differ."""
    how = f" ({loop['how']})" if loop["how"] else ""
    why = f": {loop['why_not']}" if loop["why_not"] else ""
    if loop["vectorized"] == loop["copies"]:
        return Text(f"vectorized{how}", style="green")
    if loop["vectorized"] == 0:
        return Text(f"not vectorized{why}", style="yellow")
    return Text(f"vectorized in {loop['vectorized']} of {loop['copies']} copies{how}; not the others{why}",
                style="yellow")


# ---- kplay show --ptx / --sass / --asm: each source line, then its instructions ------------------------
