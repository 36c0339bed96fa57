"""The PNG of a sweep: throughput (or time) against size, log axes, one line per variant."""

from __future__ import annotations

import sys

from .errors import UsageError
from .report import axis, baseline_names, metric, series

# The interpreter kplay runs under: right with the venv activated or not ('kplay[plot]' would ask the index).
INSTALL = f"--plot needs matplotlib: {sys.executable} -m pip install matplotlib"


def require() -> None:
    """Fail before the sweep, not after it, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(INSTALL) from None


def save(records: list[dict], key: str, path: str) -> None:
    """Write the chart to path (PNG); the measured copy bandwidth is the dashed ceiling on a GPU."""
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
    peak = next((r["peak_gbps"] for r in done if r["peak_gbps"]), None)
    if field == "gbps" and peak:
        ax.axhline(peak, ls="--", color="grey", label=f"copy bandwidth, measured ({peak:,.0f} GB/s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    swept, fixed = axis(records, key)
    ax.set_xlabel(swept)
    ax.set_ylabel(label + (" (median; lower is faster)" if field == "time" else " (from the median time)"))
    others = ", ".join(f"{k}={v:,}" for k, v in fixed.items())
    params = ", ".join(f"{k}={v}" for k, v in r0["params"].items())
    ax.set_title(" · ".join(filter(None, [r0["family"], r0["device"], r0["dtype"], others, params, f"torch {r0['torch']}"])))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(path)
