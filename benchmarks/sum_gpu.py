"""The CUDA sum ladder against torch.sum on one GPU: copy bandwidth, then every variant at 1e7, 1e8, 1e9.

    python benchmarks/sum_gpu.py                     # table on stdout
    python benchmarks/sum_gpu.py --out results/      # also sum-<gpu>.json and .md there
    python benchmarks/sum_gpu.py --sizes 1e3,1e4,1e5,1e6,1e7,1e8,1e9 --runs 3   # fast >= torch.sum at every n?

With --runs N each size is timed N times and a row is the run whose speedup is the median (all N listed).

Timing is kplay's own (playground.run.timing.bench): warm-up, CUDA events, L2 flushed between samples when the
input fits in a few L2s, contenders taking turns, >= 30 samples, median and IQR. The copy bandwidth is the
engine's too (playground.run.timing.copy_bandwidth: measured once per GPU and torch, then cached): "% copy"
here is of the copy_gbps `kplay run` records beside its % of the device's peak.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from common import spec as load_spec  # first: it puts the repository on sys.path

import torch

import playground
from playground.family import registry
from playground.run.timing import bench, copy_bandwidth

TARGETS = {10**7: ("time", 1.1), 10**8: ("throughput", 1.0), 10**9: ("throughput", 1.0)}  # the targets, fast vs torch.sum


def environment() -> dict:
    """What the numbers depend on: date, GPU, driver, clocks, versions."""
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for key, cmd in {"nvcc": ["nvcc", "--version"],
                     "nvidia-smi": ["nvidia-smi", "--format=csv,noheader",
                                    "--query-gpu=driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw"]}.items():
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
            env[key] = out.splitlines()[-1] if key == "nvcc" else out
        except (OSError, subprocess.SubprocessError):
            env[key] = "unavailable"
    return env


def cub(x: torch.Tensor) -> dict:
    """CUB's reduction through CuPy, where installed: a second reference point (a zero-copy view of x)."""
    try:
        import cupy
    except ImportError:
        return {}
    xc = cupy.from_dlpack(x)
    return {"cupy.sum (CUB)": lambda: cupy.sum(xc)}


def measure(ops: dict, spec, n: int, dtype: torch.dtype, peak: float, budget_s: float, device: str = "cuda") -> list[dict]:
    """One row per contender: torch.sum first, then the ladder (device: cpu only to try this script out)."""
    gen = torch.Generator(device=device).manual_seed(n)
    x = torch.randn(n, generator=gen, dtype=dtype, device=device)
    ref = x.sum(dtype=torch.float64).item()
    tol, _ = spec.tolerance(x, dtype)
    fns = {"torch.sum": lambda: torch.sum(x), **{name: (lambda op=op: op.sum(x)) for name, op in ops.items()}}
    if device == "cuda":
        fns.update(cub(x))
    errors = {name: abs(float(fn()) - ref) for name, fn in fns.items()}
    stats = bench(fns, device, budget_s=budget_s)
    base = stats["torch.sum"].median_s
    rows = []
    for name, s in stats.items():
        gbps = n * x.element_size() / s.median_s / 1e9
        rows.append({"n": n, "dtype": str(dtype)[6:], "variant": name, "median_us": s.median_s * 1e6,
                     "q1_us": s.q1_s * 1e6, "q3_us": s.q3_s * 1e6, "samples": s.samples, "method": s.method,
                     "gbps": gbps, "pct_copy": 100 * gbps / peak, "speedup": base / s.median_s,
                     "abs_err": errors[name], "tolerance": tol, "ok": errors[name] <= tol})
    del x
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def short(n: int) -> str:
    """10**7 -> '1e7'; other counts in full."""
    return f"1e{len(str(n)) - 1}" if str(n).strip("0") == "1" else f"{n:,}"


def table(rows: list[dict], peak: float) -> str:
    """A markdown table: it reads in a terminal and renders in the repository."""
    lines = [f"copy bandwidth (read + write): {peak:.0f} GB/s", "",
             "| n | dtype | variant | time median (IQR) | GB/s | % copy | vs torch.sum | runs | abs error ≤ tolerance |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {short(r['n'])} | {r['dtype']} | {r['variant']} | {r['median_us']:.1f} µs "
                     f"({r['q1_us']:.1f}–{r['q3_us']:.1f}) | {r['gbps']:.0f} | {r['pct_copy']:.0f}% | "
                     f"{r['speedup']:.2f}x | {', '.join(f'{x:.2f}' for x in r['speedups'])} | "
                     f"{r['abs_err']:.2g} ≤ {r['tolerance']:.2g}{'' if r['ok'] else ' FAIL'} |")
    return "\n".join(lines)


def median_runs(runs: list[list[dict]]) -> list[dict]:
    """Per contender and size, the run whose speedup over torch.sum is the median; every run's speedup kept."""
    rows = []
    for k in range(len(runs[0])):
        mine = sorted((run[k] for run in runs), key=lambda r: r["speedup"])
        rows.append({**mine[len(mine) // 2], "speedups": [round(run[k]["speedup"], 3) for run in runs],
                     "ok": all(r["ok"] for r in mine)})
    return rows


def verdicts(rows: list[dict]) -> list[str]:
    """The targets for the fast variant, float32: the times at 1e7 … 1e9, and no slower than torch.sum at any n."""
    out = []
    for n, (kind, factor) in TARGETS.items():
        fast = next((r for r in rows if r["n"] == n and r["dtype"] == "float32" and r["variant"] == "fast"), None)
        if fast is None:
            continue
        if kind == "time":
            ratio = 1 / fast["speedup"]
            ok, what = ratio <= factor, f"time {ratio:.2f}x torch.sum's (target <= {factor})"
        else:
            ok, what = fast["speedup"] >= factor, f"throughput {fast['speedup']:.2f}x torch.sum's (target >= {factor})"
        out.append(f"{'PASS' if ok else 'MISS'} n={short(n)}: fast {what}")
    fast = [r for r in rows if r["dtype"] == "float32" and r["variant"] == "fast"]
    behind = [f"{short(r['n'])} ({r['speedup']:.2f}x)" for r in fast if r["speedup"] < 1.0]
    if fast:
        out.append(f"{'MISS' if behind else 'PASS'} fast >= 1.00x torch.sum at every n of {', '.join(short(r['n']) for r in fast)}"
                   + (f": behind at {', '.join(behind)}" if behind else ""))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e7,1e8,1e9", help="comma-separated element counts")
    parser.add_argument("--dtypes", default="float32", help="comma-separated: float32, float64")
    parser.add_argument("--threads", type=int, default=256, help="threads per block for every variant")
    parser.add_argument("--budget", type=float, default=0.5, help="seconds of timing per size (at least 30 samples)")
    parser.add_argument("--runs", type=int, default=1, help="time each size this many times; a row is the median run")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for the .json and .md (default $OUT)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU visible: this benchmark runs on a GPU")
    spec = load_spec("sum")
    params = {"threads": args.threads}
    ops = {v.name: playground.load("sum", v.name, "cuda", params) for v in registry.find("sum").variants_for("cuda")}
    env = {**environment(), "threads": args.threads}
    peak = copy_bandwidth("cuda")  # 1 GiB device-to-device, read + write: `kplay run`'s copy_gbps
    rows = []
    for dtype in args.dtypes.split(","):
        for n in (int(float(s)) for s in args.sizes.split(",")):
            rows += median_runs([measure(ops, spec, n, getattr(torch, dtype), peak, args.budget) for _ in range(args.runs)])
    report = "\n".join([f"# sum ladder on {env['gpu']}", "",
                        *(f"- {k}: {v}" for k, v in env.items()), "", table(rows, peak), "", *verdicts(rows)])
    print(report)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = "sum-" + re.sub(r"[^a-z0-9]+", "-", env["gpu"].lower().replace("nvidia", "")).strip("-")  # sum-h200
        (out / f"{stem}.md").write_text(report + "\n")
        (out / f"{stem}.json").write_text(json.dumps({"env": env, "copy_gbps": peak, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
