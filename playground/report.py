"""Rich renderables built from the result record's plain data (the same data --json prints)."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

MAX_STDOUT_LINES = 20


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _time(stats: dict | None) -> list[str]:
    if not stats:
        return ["-", "-"]
    return [seconds(stats["median_s"]), seconds((stats["q3_s"] - stats["q1_s"]) / 2)]


def run_report(r: dict) -> Group:
    """The verdict table of one run, then what the checker found."""
    if any(len(v["timings"]) > 1 for v in r["variants"]):
        return Group(_labelled_table(r), *_notes(r))
    table = Table(title=_title(r), title_justify="left")
    timed = r["baseline"] is not None or any(v["time"] for v in r["variants"])
    gb = r["baseline_gbps"] is not None or any(v["gbps"] for v in r["variants"])
    gf = r["baseline_gflops"] is not None or any(v["gflops"] for v in r["variants"])
    cuda = r["device"] == "cuda"  # % of copy bandwidth only on a GPU: CPU caches make it meaningless
    table.add_column("variant")
    table.add_column("check")
    table.add_column("max err ≤ tol", justify="right")
    if timed:
        table.add_column("time", justify="right")
        table.add_column("± IQR/2", justify="right")
        if gb:
            table.add_column("GB/s", justify="right")
            if cuda:
                table.add_column("% copy", justify="right")
        if gf:
            table.add_column("GFLOP/s", justify="right")
        table.add_column("% of PyTorch" if gf else "speedup", justify="right")
    speed = "{:.0%}" if gf else "{:.2f}×"  # compute-bound kernels read as a fraction of cuBLAS/MKL
    for v in r["variants"]:
        c = v["check"]
        err = "inf" if c["max_abs_err"] is None else f"{c['max_abs_err']:.2g}"
        row = [v["variant"], "[green]PASS[/]" if c["ok"] else "[red]FAIL[/]", f"{err} ≤ {c['tolerance']:.2g}"]
        if timed:
            row += _time(v["time"])
            if gb:
                row += [_num(v["gbps"])] + ([_num(v["pct_peak"], "{:.0f}%")] if cuda else [])
            if gf:
                row.append(_num(v["gflops"]))
            row.append(_num(v["speedup"], speed))
        table.add_row(*row)
    if r["baseline"]:
        row = ["[dim]PyTorch[/]", "", "", *_time(r["baseline"])]
        if gb:
            pct = r["baseline_gbps"] and r["peak_gbps"] and 100 * r["baseline_gbps"] / r["peak_gbps"]
            row += [_num(r["baseline_gbps"])] + ([_num(pct, "{:.0f}%")] if cuda else [])
        if gf:
            row.append(_num(r["baseline_gflops"]))
        table.add_row(*row, speed.format(1))
    return Group(table, *_notes(r))


def _title(r: dict) -> str:
    sizes = " ".join(f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in r["sizes"].items())
    params = " ".join(f"{k}={v}" for k, v in r["params"].items())
    return f"[b]{r['family']}[/b] · {r['device']} · {r['dtype']} · {sizes} · seed {r['seed']}" + (f" · {params}" if params else "")


def _labelled_table(r: dict) -> Table:
    """Families timed in steps (LLTM: forward, backward): a time per step, on events and wall clock, a
    speedup per step and baseline, and the spec's extra columns (gradcheck)."""
    labels = list(next(v["timings"] for v in r["variants"] if v["timings"]))
    wall = any(v["walls"] for v in r["variants"])
    speedups = list(next((v["speedups"] for v in r["variants"] if v["speedups"]), {}))
    extras = list(dict.fromkeys(k for v in r["variants"] for k in v["extra"]))
    table = Table(title=_title(r), title_justify="left")
    for col in ("variant", "check", "max err ≤ tol"):
        table.add_column(col)
    short = {"forward": "fwd", "backward": "bwd"}
    for label in labels:
        table.add_column(short.get(label, label) + (" events" if wall else ""), justify="right")
        if wall:
            table.add_column(short.get(label, label) + " wall", justify="right")
    for key in speedups:  # "forward vs eager" -> "fwd ×eager"
        label, _, who = key.partition(" vs ")
        table.add_column(f"{short.get(label, label)} ×{who}", justify="right")
    for key in extras:
        table.add_column(key)

    def times(timings: dict, walls: dict) -> list[str]:
        row = []
        for label in labels:
            row.append(seconds(timings[label]["median_s"]) if label in timings else "-")
            if wall:
                row.append(seconds(walls[label]["median_s"]) if label in walls else "-")
        return row

    for v in r["variants"]:
        c = v["check"]
        err = "inf" if c["max_abs_err"] is None else f"{c['max_abs_err']:.2g}"
        table.add_row(v["variant"], "[green]PASS[/]" if c["ok"] else "[red]FAIL[/]", f"{err} ≤ {c['tolerance']:.2g}",
                      *times(v["timings"], v["walls"]), *[_num(v["speedups"].get(k), "{:.2f}×") for k in speedups],
                      *[str(v["extra"].get(k, "")) for k in extras])
    for who, timings in r["baselines"].items():
        table.add_row(f"[dim]{who}[/]", "", "", *times(timings, r["baseline_walls"].get(who, {})),
                      *["" for _ in speedups], *["" for _ in extras])
    return table


def _notes(r: dict) -> list:
    out = []
    first = r["variants"][0]
    c = first["check"]
    out.append(Text(f"checked at {', '.join(c['cases'])}; tolerance: {c['tolerance_source']}", style="dim"))
    stats = first["time"] or r["baseline"]
    if stats:
        peak = f"; copy bandwidth {r['peak_gbps']:.0f} GB/s measured here" if r["peak_gbps"] and r["device"] == "cuda" else ""
        out.append(Text(f"timing: {stats['method']}, {stats['samples']} samples, kernel and baseline taking turns{peak}", style="dim"))
    for v in r["variants"]:
        if v["stdout"]:
            lines = v["stdout"].splitlines()
            more = f"\n… {len(lines) - MAX_STDOUT_LINES} more lines" if len(lines) > MAX_STDOUT_LINES else ""
            out.append(Panel("\n".join(lines[:MAX_STDOUT_LINES]) + more, title=f"{v['variant']} printed", title_align="left", expand=False))
        for m in v["check"]["mismatches"]:
            out.append(Text(f"✗ {v['variant']}: {m}", style="red"))
    verdict = "[green b]PASS[/]" if r["ok"] else "[red b]FAIL[/]: the output does not match the reference"
    out.append(Text.from_markup(verdict))
    return out


def family_table(families: list[dict]) -> Table:
    table = Table()
    for col in ("kernel", "summary", "variants", "devices"):
        table.add_column(col)
    for f in families:
        table.add_row(f["name"], f["summary"], ", ".join(f["variants"]), ", ".join(f["devices"]))
    return table


def checks_table(rows: list[tuple[str, bool, str]]) -> Table:
    table = Table(show_header=False, box=None)
    for what, ok, detail in rows:
        table.add_row("[green]OK[/]" if ok else "[red]FIX[/]", what, detail)
    return table


# ---- sweeps (kplay bench) ---------------------------------------------------------------------------------

BLOCKS = "▁▂▃▄▅▆▇█"
COLORS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


def short(n: int) -> str:
    """An axis label of a few characters: 1000 -> 1e3, 2048 -> 2048, 250000 -> 2.5e5."""
    if n < 10_000 and n != 1000:
        return str(n)
    mantissa, exp = f"{n:.1e}".split("e")  # rounds first: 99999 -> 1.0e+05, not 10e4
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exp)}"


def sweep_table(records: list[dict], key: str) -> Group:
    """Size × variant: check, time, throughput, speedup; one section per size, then the skipped points."""
    from .sweep import axis, metric

    field, label = metric(records)
    done = [r for r in records if "skipped" not in r]
    first = done[0] if done else {"family": records[0]["family"], "device": "", "dtype": "", "params": {}}
    swept, fixed = axis(records, key)
    others = " ".join(f"{k}={v:,}" for k, v in fixed.items())
    title = f"[b]{first['family']}[/b] · {first['device']} · {first['dtype']} · {swept} swept" + (f" · {others}" if others else "")
    pct = field == "gbps" and first["device"] == "cuda"
    table = Table(title=title, title_justify="left")
    for col, right in ((swept, True), ("variant", False), ("check", False), ("time", True), ("± IQR/2", True)):
        table.add_column(col, justify="right" if right else "left")
    if field != "time":
        table.add_column(label, justify="right")
    if pct:
        table.add_column("% copy", justify="right")
    table.add_column("speedup", justify="right")
    for r in records:
        size = f"{r['sizes'][key]:,}"
        if "skipped" in r:
            table.add_row(size, Text("skipped", style="yellow"), end_section=True)
            continue
        lines = [(v["variant"], "[green]PASS[/]" if v["check"]["ok"] else "[red]FAIL[/]", v["time"], v.get(field),
                  v["pct_peak"], v["speedup"]) for v in r["variants"]]
        if r["baseline"]:
            base = r.get(f"baseline_{field}")
            lines.append(("[dim]PyTorch[/]", "", r["baseline"], base, base and r["peak_gbps"] and 100 * base / r["peak_gbps"], 1.0))
        for k, (name, check, stats, value, peak, speedup) in enumerate(lines):
            row = [size if k == 0 else "", name, check, *_time(stats)]
            if field != "time":
                row.append(_rate(value))
            if pct:
                row.append(_num(peak, "{:.0f}%"))
            row.append(_num(speedup, "{:.2f}×"))
            table.add_row(*row, end_section=k == len(lines) - 1)
    notes = [Text(f"{key}={r['sizes'][key]:,} skipped: {r['skipped']}", style="yellow") for r in records if "skipped" in r]
    return Group(table, *notes)


def _rate(x: float | None) -> str:
    """3 significant digits, without an exponent: 0.657, 46.1, 3,860."""
    return "-" if x is None else f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def sweep_chart(records: list[dict], key: str) -> Group:
    """One sparkline per variant: the throughput (or time) at each size, on a common scale."""
    from .sweep import axis, metric, series

    field, label = metric(records)
    lines = series(records, key, field)
    values = [v for points in lines.values() for _, v in points]
    if not values:
        return Group()
    peak = next((r["peak_gbps"] for r in records if r.get("peak_gbps")), None) if field == "gbps" else None
    low, high = min(values), max(values + [peak or 0])
    log = high / max(low, 1e-30) > 100  # six decades of GB/s on a GPU: a linear scale shows only the top
    sizes = sorted({n for points in lines.values() for n, _ in points})
    chart = Table(box=None, pad_edge=False, show_edge=False)
    chart.add_column("")
    for n in sizes:
        chart.add_column(short(n), justify="center", min_width=3, no_wrap=True)
    best = max if field != "time" else min
    chart.add_column("best", justify="right")
    for i, (name, points) in enumerate(lines.items()):
        at = dict(points)
        color = "white" if name == "PyTorch" else COLORS[i % len(COLORS)]
        cells = [_block(at[n], low, high, log, max(3, len(short(n)))) if n in at else "" for n in sizes]
        n, v = best(points, key=lambda p: p[1])
        chart.add_row(name, *(Text(c, style=color) for c in cells), f"{_value(v, field)} at {short(n)}")
    scale = "log scale" if log else "linear scale"
    top = f"{_value(high, field)} {'(copy bandwidth, measured)' if peak and high == peak else ''}".strip()
    head = Text(f"{label} against {axis(records, key)[0]} ({scale}: ▁ = {_value(low, field)}, █ = {top})", style="dim")
    return Group(head, chart)


def _block(value: float, low: float, high: float, log: bool, width: int) -> str:
    import math

    if high <= low:
        level = len(BLOCKS) - 1
    elif log:
        level = round((len(BLOCKS) - 1) * math.log(value / low) / math.log(high / low))
    else:
        level = max(0, math.ceil(len(BLOCKS) * value / high) - 1)
    return BLOCKS[level] * width


def _value(v: float, field: str) -> str:
    return seconds(v) if field == "time" else f"{_rate(v)} {'GB/s' if field == 'gbps' else 'GFLOP/s'}"
