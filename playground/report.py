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
    sizes = " ".join(f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in r["sizes"].items())
    params = " ".join(f"{k}={v}" for k, v in r["params"].items())
    title = f"[b]{r['family']}[/b] · {r['device']} · {r['dtype']} · {sizes} · seed {r['seed']}" + (f" · {params}" if params else "")
    table = Table(title=title, title_justify="left")
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
        table.add_column("speedup", justify="right")
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
            row.append(_num(v["speedup"], "{:.2f}×"))
        table.add_row(*row)
    if r["baseline"]:
        row = ["[dim]PyTorch[/]", "", "", *_time(r["baseline"])]
        if gb:
            pct = r["baseline_gbps"] and r["peak_gbps"] and 100 * r["baseline_gbps"] / r["peak_gbps"]
            row += [_num(r["baseline_gbps"])] + ([_num(pct, "{:.0f}%")] if cuda else [])
        if gf:
            row.append(_num(r["baseline_gflops"]))
        table.add_row(*row, "1.00×")
    return Group(table, *_notes(r))


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
