"""linear on the GPU: F.linear (cuBLAS, TF32 off) against cuda-naive and cuda-tiled, forward, float32.

    python benchmarks/linear_gpu.py [--size 4096] [--out benchmarks/results]

Builds through kplay (the same sources and flags as `kplay run`), checks each kernel against float64 at
the benchmark size, then times the forward with kplay's timer (playground.timing.bench: 3 warm-ups, CUDA
events, the contenders taking turns, at least 30 samples and --budget seconds, median and IQR). Writes
linear-<gpu>-<date>.json and .md under --out and prints the table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, spec as load_spec  # first: it puts the repository on sys.path

import torch

import playground
from playground.timing import bench

# cuda-tiled's default tiles, then other shapes worth knowing about (all spill-free per ptxas -v).
TILES = [
    dict(block_m=128, block_n=128, block_k=8, thread_m=8, thread_n=8),
    dict(block_m=128, block_n=128, block_k=16, thread_m=8, thread_n=8),
    dict(block_m=128, block_n=64, block_k=8, thread_m=8, thread_n=4),
    dict(block_m=256, block_n=128, block_k=8, thread_m=16, thread_n=8),
    dict(block_m=128, block_n=256, block_k=8, thread_m=8, thread_n=16),
]


def tile_name(p: dict) -> str:
    return f"{p['block_m']}x{p['block_n']}x{p['block_k']}, {p['thread_m']}x{p['thread_n']}/thread"


def contenders(spec, inputs, builds: list[tuple[str, dict]], device: str) -> dict:
    """label -> (call, variant, build seconds): F.linear first, then each (variant, params) built through kplay."""
    x, w, b = inputs
    found = {"F.linear (cuBLAS, TF32 off)": (lambda: torch.nn.functional.linear(x, w, b), "", 0.0)}
    for variant, params in builds:
        t0 = time.perf_counter()
        ops = playground.load("linear", variant=variant, device=device, params=params or None)
        label = variant + (f" ({tile_name(params)})" if params else "")
        found[label] = (lambda ops=ops: spec.linear(ops, x, w, b), variant, time.perf_counter() - t0)
    return found


def measure(found: dict, spec, inputs, flops: int, budget_s: float, device: str) -> list[dict]:
    """Check each contender against float64, then time them all in turns (kplay's timer), one row each.

    The slowest (cuda-naive, 0.27 s a call at 4096^3) sets the pace of the turns: 30 samples each.
    """
    ref = torch.nn.functional.linear(*(t.double() for t in inputs))  # y alone: the forward is what is timed
    tol = spec.product_tolerance(inputs[0], inputs[1], torch.float32, extra=inputs[2])  # y's bound: the forward is timed
    errors = {label: (fn().double() - ref).abs().max().item() for label, (fn, _, _) in found.items()}
    stats = bench({label: fn for label, (fn, _, _) in found.items()}, device, budget_s=budget_s)
    rows = []
    for label, (_, variant, build_s) in found.items():
        t, err = stats[label], errors[label]
        rows.append({"contender": label, "variant": variant, "median_ms": t.median_s * 1e3, "q1_ms": t.q1_s * 1e3,
                     "q3_ms": t.q3_s * 1e3, "samples": t.samples, "method": t.method, "gflops": flops / t.median_s / 1e9,
                     "max_abs_err": err, "tolerance": tol, "ok": err <= tol, "build_s": round(build_s, 1)})
    return rows


def summarise(rows: list[dict]) -> dict:
    """Each row's share of F.linear (the first row) and multiple of cuda-naive; the target's verdict."""
    base = rows[0]["gflops"]
    naive = next(r["gflops"] for r in rows if r["variant"] == "cuda-naive")
    for r in rows:
        r["pct_of_F_linear"] = 100 * r["gflops"] / base
        r["x_naive"] = r["gflops"] / naive
    default = next(r for r in rows if r["variant"] == "cuda-tiled")
    return {"tiled_default_pct_of_F_linear": default["pct_of_F_linear"], "tiled_default_x_naive": default["x_naive"],
            "target": "cuda-tiled >= 50% of F.linear and >= 5x cuda-naive",
            "met": default["pct_of_F_linear"] >= 50 and default["x_naive"] >= 5 and default["ok"]}


def markdown(rows: list[dict], verdict: dict, meta: dict, s: int) -> list[str]:
    lines = [f"# linear forward on {meta['gpu']}, {s}x{s}x{s} float32", "",
             f"{meta['date']} · torch {meta['torch']} · CUDA {meta['cuda']} · {meta['nvcc']} · "
             f"driver, max SM clock: {meta['driver, max SM clock']}", "",
             f"{rows[0]['method']}, 3 warm-ups, contenders taking turns, median (IQR) of the samples shown; "
             f"error = max |y - float64 reference| (tolerance {rows[0]['tolerance']:.2e}).", "",
             "| contender | median ms (IQR) | samples | GFLOP/s | % of F.linear | x naive | max err | check |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['contender']} | {r['median_ms']:.3f} ({r['q1_ms']:.3f}-{r['q3_ms']:.3f}) | {r['samples']} | "
                     f"{r['gflops']:,.0f} | {r['pct_of_F_linear']:.1f}% | {r['x_naive']:.1f}x | {r['max_abs_err']:.1e} | "
                     f"{'pass' if r['ok'] else 'FAIL'} |")
    return lines + ["", f"Target ({verdict['target']}), default tiles: "
                    f"{verdict['tiled_default_pct_of_F_linear']:.1f}% of F.linear, {verdict['tiled_default_x_naive']:.1f}x naive: "
                    f"{'met' if verdict['met'] else 'NOT met'}."]


def versions() -> dict:
    try:
        nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except OSError:
        nvcc = "not found"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        smi = ""
    return {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "nvcc": nvcc, "driver, max SM clock": smi}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096, help="batch = in = out")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timing in all (at least 30 samples each)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2

    spec = load_spec("linear")  # also turns TF32 off for cuBLAS
    torch.backends.cuda.matmul.allow_tf32 = False
    s = args.size
    sizes = {"batch": s, "in": s, "out": s}
    x, w, b, _ = spec.make_inputs(sizes, torch.float32, "cpu", torch.Generator().manual_seed(0))
    inputs = x.cuda(), w.cuda(), b.cuda()
    flops = spec.flops(sizes)
    builds = [("cuda-naive", {})] + [("cuda-tiled", p) for p in TILES]
    rows = measure(contenders(spec, inputs, builds, "cuda"), spec, inputs, flops, args.budget, "cuda")
    verdict = summarise(rows)
    meta = versions()
    record = {**meta, "size": f"{s} x {s} x {s} (batch x in x out), float32, forward", "flops": flops,
              "timing": f"{rows[0]['method']}, 3 warm-ups, contenders taking turns, median", "rows": rows, "verdict": verdict}
    lines = markdown(rows, verdict, meta, s)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"linear-{meta['gpu'].split()[-1].lower()}-{meta['date']}"
    (args.out / f"{stem}.json").write_text(json.dumps(record, indent=1))
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if verdict["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
