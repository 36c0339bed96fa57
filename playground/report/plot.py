"""The PNGs of a sweep: throughput (or time) against size, and the roofline; log axes, one series per contender."""

from __future__ import annotations

import sys

from ..core.errors import UsageError
from .tables import axis, baseline_names, metric, series, short

# The interpreter kplay runs under: right with the venv activated or not ('kplay[plot]' would ask the index).
INSTALL = f"--plot needs matplotlib: {sys.executable} -m pip install matplotlib"


def require() -> None:
    """Fail before the sweep, not after it, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(INSTALL) from None


def save(records: list[dict], key: str, path: str) -> None:
    """Write the chart to path (PNG); the device's peak is the dashed ceiling on a GPU."""
    require()
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state

    field, label = metric(records)
    lines = series(records, key, field)
    done = [r for r in records if "skipped" not in r]
    if not done:
        raise UsageError("--plot: no point of the sweep was timed, nothing to draw")
    r0 = done[0]
    fig = Figure(figsize=(8, 5), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    bases = baseline_names(records)
    for name, points in lines.items():
        xs, ys = zip(*points)
        if name in bases:  # dashed and underneath: a variant that matches it stays visible on top
            ax.plot(xs, ys, "s--", color="black", lw=1.5, ms=5, zorder=2, label=f"{name} (the reference)")
        else:
            ax.plot(xs, ys, "o-", lw=1.5, zorder=3, label=name)
    ceiling = {"gbps": ("peak_gbps", "GB/s"), "gflops": ("peak_gflops", "GFLOP/s")}.get(field)
    peak = next((r[ceiling[0]] for r in done if r.get(ceiling[0])), None) if ceiling else None
    if peak:
        ax.axhline(peak, ls="--", color="grey", label=f"device peak ({peak:,.0f} {ceiling[1]})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    swept, fixed = axis(records, key)
    ax.set_xlabel(swept)
    ax.set_ylabel(label + (" (median; lower is faster)" if field == "time" else " (from the median time)"))
    ax.set_title(_title(r0, fixed))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(path)


def _title(r0: dict, fixed: dict) -> str:
    others = ", ".join(f"{k}={v:,}" for k, v in fixed.items())
    params = ", ".join(f"{k}={v}" for k, v in r0["params"].items())
    return " · ".join(filter(None, [r0["family"], r0["device"], r0["dtype"], others, params, f"torch {r0['torch']}"]))


def roofline_points(records: list[dict], key: str) -> dict[str, list[tuple[float, float, int]]]:
    """{contender: [(FLOP/byte, attained GFLOP/s, size), ...]}: a point per size where both hooks give a number."""
    out: dict[str, list] = {}
    for r in records:
        if "skipped" in r or not (r.get("traffic") and r.get("flops")):
            continue
        for name, t in [*((v["variant"], v) for v in r["variants"]), *r["baselines"].items()]:
            if t["gflops"]:
                out.setdefault(name, []).append((r["flops"] / r["traffic"], t["gflops"], r["sizes"][key]))
    return out


def roofline(records: list[dict], key: str, path: str):
    """Write the roofline to path (PNG): attained GFLOP/s against FLOP/byte, under the device's two ceilings.
    Returns the figure (tests read its series)."""
    require()
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    points = roofline_points(records, key)
    done = [r for r in records if "skipped" not in r]
    if not points:
        family = done[0]["family"] if done else "the family"
        raise UsageError(f"--roofline: no timed point of {family} has both traffic and flops (its spec.py hooks)")
    r0 = done[0]
    fig = Figure(figsize=(8, 6), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    bases = baseline_names(records)
    for name, pts in points.items():
        xs, ys, _ = zip(*pts)
        style = dict(marker="s", ls="--", color="black", ms=5, zorder=2) if name in bases else dict(marker="o", ls="-", zorder=3)
        line, = ax.plot(xs, ys, lw=1, label=f"{name} (the reference)" if name in bases else name, **style)
        for x, y, n in {pts[0], pts[-1]}:  # the first and last sizes: enough to read the direction, no clutter
            ax.annotate(short(n), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7, color=line.get_color())
    xs = [x for pts in points.values() for x, _, _ in pts]
    ceilings = _ceilings(ax, r0, min(xs) / 4, max(xs) * 4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for scale in (ax.xaxis, ax.yaxis):  # 0.25 and 100, not 2.5x10^-1 and 10^2
        scale.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.10g}"))
        scale.set_minor_formatter(NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOP/byte: the spec's flops over its traffic)")
    ax.set_ylabel("attained GFLOP/s (from the median time)")
    note = "" if ceilings else " · no peak known on the CPU: points only"
    ax.set_title(_title(r0, axis(records, key)[1]) + note, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    # Beneath the axes, where it never hides a point (ncol, not ncols, and no loc="outside ...": older matplotlib).
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    fig.savefig(path)
    return fig


def _ceilings(ax, r: dict, low: float, high: float) -> bool:
    """The roof on a GPU: the bandwidth diagonal up to the ridge point, then the compute line, and the measured
    copy dotted beneath it. False where the device has no peak (the CPU)."""
    bandwidth, compute = r.get("peak_gbps"), r.get("peak_gflops")
    if not bandwidth:
        return False
    ridge = compute / bandwidth if compute else high
    xs = sorted({low, high, *([ridge] if low < ridge < high else [])})
    cap = compute or float("inf")
    flops = f", {r['dtype']} {compute:,.0f} GFLOP/s (CUDA cores)" if compute else ""
    ax.plot(xs, [min(x * bandwidth, cap) for x in xs], color="grey", lw=2, zorder=1,
            label=f"device peak: memory {bandwidth:,.0f} GB/s{flops}")
    if compute and low < ridge < high:
        ax.annotate(f"ridge {ridge:.3g} FLOP/byte", (ridge, compute), textcoords="offset points", xytext=(4, -12),
                    fontsize=7, color="grey")
    if r.get("copy_gbps"):
        ax.plot(xs, [min(x * r["copy_gbps"], cap) for x in xs], ":", color="grey", lw=1, zorder=1,
                label=f"copy, measured ({r['copy_gbps']:,.0f} GB/s)")
    return True
