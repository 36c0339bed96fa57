"""`kplay profile`: one call at the requested size, after a warm-up, and the kernels it launched.

Where ncu is present and may read the counters: one child under ncu, each call in an NVTX range, gives every
kernel's time, launch configuration, registers and shared memory, with the speed-of-light and occupancy
figures. Otherwise (no ncu, no access to the counters, ncu failed) torch.profiler's records, any GPU, no
privileges, with a note saying why ncu's figures are missing. The family's first baseline is profiled beside
the variant.
"""

from __future__ import annotations

import csv
import io
import re
import tempfile
from pathlib import Path

from ..compiler import kernel_resources as resources
from ..core import events, names
from ..core.errors import UsageError
from ..core.names import short_name

NCU_ARGS = ["--nvtx", "--nvtx-include", f"{events.NVTX_RANGE}/", "--clock-control", "none", "--section", "SpeedOfLight",
            "--section", "Occupancy", "--section", "LaunchStats", "--csv", "--page", "details", "--target-processes", "all"]
NO_COUNTERS = ("ncu cannot read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root, or allow all users "
               "(options nvidia NVreg_RestrictProfilingToAdminUsers=0 in /etc/modprobe.d, then reboot)")
METRICS = {  # ncu's metric name -> the record's key
    "Memory Throughput": "memory_pct", "Compute (SM) Throughput": "compute_pct", "DRAM Throughput": "dram_pct",
    "L2 Cache Throughput": "l2_pct", "Achieved Occupancy": "achieved_occupancy_pct",
    "Theoretical Occupancy": "theoretical_occupancy_pct", "Duration": "duration_ns",
    "Registers Per Thread": "registers", "Static Shared Memory Per Block": "static_shared_bytes",
    "Dynamic Shared Memory Per Block": "dynamic_shared_bytes",
}
# The tensor cores' share of their peak, where this GPU's ncu has the metric: HMMA (mma.sync, wmma; Ampere on)
# and GMMA (wgmma; Hopper). Asked by name (--metrics) only when `ncu --query-metrics` lists it.
TENSOR_METRICS = {"sm__pipe_tensor_op_hmma_cycles_active": "hmma_pct", "sm__pipe_tensor_op_gmma_cycles_active": "gmma_pct"}
TENSOR_ROLLUP = ".avg.pct_of_peak_sustained_active"
METRICS |= {name + TENSOR_ROLLUP: key for name, key in TENSOR_METRICS.items()}
ADMIN_ONLY = Path("/proc/driver/nvidia/params")  # "RmProfilingAdminOnly: 1": the counters are for root alone


# ---- the child: the call, profiled ------------------------------------------------------------------------

# ---- parsers (tested against the GPU box's real output in tests/data) --------------------------------------

def ncu_kernels(text: str) -> list[dict]:
    """ncu's --csv --page details output -> one record per profiled kernel, in launch order."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID","Process ID"')), None)
    if start is None:
        return []
    rows = [r for r in csv.reader(io.StringIO("\n".join(ln for ln in lines[start:] if ln.startswith('"'))))]
    header, kernels = rows[0], {}
    for row in rows[1:]:
        r = dict(zip(header, row))
        k = kernels.setdefault(r["ID"], {"name": r["Kernel Name"], "short": short_name(r["Kernel Name"], names.WIDTH), "hints": [],
                                         "grid": _triple(r.get("Grid Size")), "block": _triple(r.get("Block Size"))})
        if r.get("Metric Name") in METRICS:
            k[METRICS[r["Metric Name"]]] = _number(r["Metric Value"])
        if r.get("Rule Type") in ("OPT", "INF") and r.get("Rule Description"):
            k["hints"].append((r["Rule Type"], r["Rule Description"]))
    for k in kernels.values():
        hints = k.pop("hints")
        best = next((d for t, d in hints if t == "OPT"), None) or next((d for _, d in hints), None)
        k["hint"] = first_sentence(best) if best else None
    return list(kernels.values())


def _triple(text: str | None) -> list[int] | None:
    """ncu's '(1, 763, 1)' -> [1, 763, 1]."""
    found = re.findall(r"\d+", text or "")
    return [int(d) for d in found] if len(found) == 3 else None


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def first_sentence(text: str) -> str:
    """ncu's rule text, cut to its first sentence ('... (100.0%) and ... (85.0%) can be ...' stays whole)."""
    text = re.sub(r"\s*\(https?://[^)]*\)", "", text).strip()
    m = re.search(r"(?<=[A-Za-z0-9%)\]])\.\s+(?=[A-Z])", text)
    return text[:m.start() + 1] if m else text


# ---- the parent: the profile, and ncu's figures matched to its kernels ------------------------------------

def run(req, on_event=events.ignore, ncu: bool = True) -> dict:
    """The profile record: from one child under ncu where it can read the counters; else from a child under
    torch.profiler, with a note in "ncu" saying why ncu's figures are missing (None when they are there)."""
    from ..child import spawn as isolate
    from ..compiler.toolchain import cuda_tool
    from ..core.errors import BuildError

    exe = cuda_tool("ncu") if ncu else None
    note = ("skipped (--no-ncu)" if not ncu else "ncu not found (PATH, the CUDA toolkit's bin)" if not exe
            else counters_locked())
    if note is None:
        on_event(events.PHASE, phase="ncu")
        result, text, error = _under_ncu(req, exe, on_event)
        if isinstance(error, (BuildError, UsageError)):  # the student's build, a bad request: the same in any child
            raise error
        if result:
            note = from_ncu(result, text)
        else:
            said = next((d for d in getattr(error, "details", []) if d.startswith("==ERROR==")), "")
            note = NO_COUNTERS if "ERR_NVGPUCTRPERM" in text + said else f"the run under ncu failed: {error}" + (
                f" ({said.removeprefix('==ERROR==').strip()})" if said else "")
        if note is None:
            rates(result)
            return result | {"ncu": None}
    result = isolate.run(req, on_event)  # a crash here is the run's error; under ncu it was only ncu's
    rates(result)
    return result | {"ncu": note}


def counters_locked() -> str | None:
    """NO_COUNTERS where the driver keeps the GPU's counters for root and this is not root; else None (try)."""
    import os

    try:
        locked = "RmProfilingAdminOnly: 1" in ADMIN_ONLY.read_text()
    except OSError:  # no such file (not Linux, no driver): ncu will say
        return None
    return NO_COUNTERS if locked and os.geteuid() != 0 else None


def _under_ncu(req, exe: str, on_event) -> tuple[dict | None, str, Exception | None]:
    """The child's record under ncu (None if it failed), ncu's CSV log, and the child's error."""
    import dataclasses

    from ..child import spawn as isolate
    from ..core.errors import KplayError

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "ncu.csv"
        result, error = None, None
        try:
            under = [exe, *NCU_ARGS, *tensor_metrics(exe), "--log-file", str(log)]
            result = isolate.run(dataclasses.replace(req, mode="nvtx"), on_event, under=under, writable=(tmp,))
        except KplayError as e:
            error = e
        return result, (log.read_text(errors="replace") if log.exists() else ""), error


def tensor_metrics(exe: str) -> list[str]:
    """ncu's --metrics for the tensor pipes this GPU's ncu knows (none if it cannot say): an unknown name would
    fail the whole profile."""
    import subprocess

    try:
        known = subprocess.run([exe, "--query-metrics"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    names = [name + TENSOR_ROLLUP for name in TENSOR_METRICS if re.search(rf"^{name}\b", known, re.M)]
    return ["--metrics", ",".join(names)] if names else []


def rates(result: dict) -> None:
    """Each contender's GPU time (its kernels, and any memsets and copies, added up), GB/s and % of peak."""
    for c in result["contenders"]:
        total = sum(k["us"] for k in c["kernels"])
        for k in c["kernels"]:
            k["share_pct"] = 100 * k["us"] / total if total else None
        c["gpu_us"] = total
        c["gbps"] = result["nbytes"] / (total * 1e-6) / 1e9 if result["nbytes"] and total else None
        c["pct_peak"] = 100 * c["gbps"] / result["peak_gbps"] if c["gbps"] and result["peak_gbps"] else None


def from_ncu(result: dict, text: str) -> str | None:
    """Give each contender the kernels ncu profiled in its calls (each call's begin at a spin kernel, in
    launch order); None, or a note saying why that cannot be done."""
    calls = result.pop("calls", [])
    if "ERR_NVGPUCTRPERM" in text:
        return NO_COUNTERS
    groups = resources.after_separators(ncu_kernels(text))
    if not any(groups):
        return "ncu profiled no kernel" + (f": {_last_error(text)}" if _last_error(text) else "")
    if len(groups) != len(calls):
        return f"ncu saw {len(groups)} of the {len(calls)} calls: its figures are left out"
    for (i, step), group in zip(calls, groups):
        result["contenders"][i]["kernels"] += [_kernel(k, step) for k in group]
    return None


def _kernel(n: dict, step: str) -> dict:
    """A kernel's row from ncu's record (which it keeps under "ncu")."""
    shared = [n.get("static_shared_bytes"), n.get("dynamic_shared_bytes")]
    return {"kind": "kernel", "name": n["name"], "short": n["short"], "step": step,
            "us": (n.get("duration_ns") or 0.0) / 1e3, "grid": n["grid"], "block": n["block"],
            "registers": _int(n.get("registers")), "shared_bytes": None if None in shared else int(sum(shared)),
            "occupancy_pct": n.get("achieved_occupancy_pct"), "ncu": n}


def _int(x: float | None) -> int | None:
    return None if x is None else int(x)


def _last_error(text: str) -> str:
    errors = [ln.removeprefix("==ERROR==").strip() for ln in text.splitlines() if ln.startswith("==ERROR==")]
    return errors[-1] if errors else ""


def check_device(device: str) -> None:
    if device == "cpu":
        raise UsageError("kplay profile profiles CUDA kernels: use --device cuda")


# ---- the report --------------------------------------------------------------------------------------------

def report(r: dict):
    """Per contender its kernels (time, share, launch, registers, shared memory), the call's GB/s; ncu's lines."""
    from rich.console import Group
    from rich.text import Text

    sizes = " · ".join(f"{k}={v:,}" for k, v in r["sizes"].items())
    peak = f" · peak {r['peak_gbps']:,.0f} GB/s" if r.get("peak_gbps") else ""
    parts = [Text(f"{r['family']} · {r['device']} · {r['dtype']} · {sizes}{peak}", style="bold")]
    table = _table(("", "left"), ("kernel", "left"), ("time", "right"), ("share", "right"), ("grid×block", "right"),
                   ("regs", "right"), ("smem B", "right"))
    for c in r["contenders"]:
        for i, k in enumerate(c["kernels"]):
            table.add_row(c["name"] if i == 0 else "", k["short"],
                          f"{k['us']:.3g} µs", f"{k['share_pct']:.0f}%" if k.get("share_pct") is not None else "-",
                          _launch(k), _opt(k["registers"]), _bytes(k["shared_bytes"]))
    parts.append(table)
    for c in r["contenders"]:
        rate = f" · {c['gbps']:,.0f} GB/s" if c.get("gbps") else ""
        pct = f" ({c['pct_peak']:.0f}% of peak)" if c.get("pct_peak") else ""
        parts.append(Text(f"{c['name']}: {c['gpu_us']:.3g} µs on the GPU{rate}{pct}"))
    parts += _ncu_lines(r)
    return Group(*parts)


def _ncu_lines(r: dict) -> list:
    """ncu's figures, one row per kernel (% of the device's peak), then its hints, each once."""
    from rich.text import Text

    if r.get("ncu"):
        return [Text(f"ncu: {r['ncu']}", style="dim" if r["ncu"].startswith("skipped") else "yellow")]
    kernels = [k.get("ncu") or {} for c in r["contenders"] for k in c["kernels"]]
    tensor = any(n.get("hmma_pct") is not None or n.get("gmma_pct") is not None for n in kernels)
    # headers as narrow as their cells: with a tensor column, a 30-character kernel still fits 80 columns
    table = _table(("ncu", "left"), ("kernel", "left"), ("mem%", "right"), ("SM%", "right"), ("DRAM%", "right"),
                   ("L2%", "right"), ("occupancy", "right"), *([("tensor%", "right")] if tensor else []))
    hints = {}
    for c in r["contenders"]:
        first = True
        for k in c["kernels"]:
            n = k.get("ncu")
            if not n:
                continue
            pct = lambda key: _opt(n.get(key), "{:.0f}")
            pipes = [x for x in (n.get("hmma_pct"), n.get("gmma_pct")) if x is not None]  # the busier tensor pipe
            table.add_row(c["name"] if first else "", k["short"], pct("memory_pct"), pct("compute_pct"), pct("dram_pct"),
                          pct("l2_pct"), f"{pct('achieved_occupancy_pct')} / {pct('theoretical_occupancy_pct')}%",
                          *([_opt(max(pipes) if pipes else None, "{:.0f}")] if tensor else []))
            first = False
            if n.get("hint"):
                hints.setdefault(n["hint"], k["short"])
    return [table, *(Text(f"{kernel}: {hint}", style="dim") for hint, kernel in hints.items())]


def _table(*columns):
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, padding=0, pad_edge=False, show_edge=False)  # the box puts one space between
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=True)
    return table


def _dims(d) -> str:
    """[1056, 1, 1] -> '1056'; [1, 763, 1] -> '1,763' (trailing 1s dropped)."""
    if not d:
        return "-"
    d = list(d)
    while len(d) > 1 and d[-1] == 1:
        d.pop()
    return ",".join(map(str, d))


def _launch(k: dict) -> str:
    return f"{_dims(k['grid'])}×{_dims(k['block'])}" if k.get("grid") else "-"


def _opt(x, fmt: str = "{}") -> str:
    return "-" if x is None else fmt.format(x)


def _bytes(n) -> str:
    return "-" if n is None else f"{n:,}"
