"""linear on the GPU: F.linear (cuBLAS, TF32 off) against cuda-naive and cuda-tiled, forward, float32.

    python benchmarks/linear_gpu.py [--size 4096] [--out benchmarks/results]

Builds through kplay (the same sources and flags as `kplay run`), checks each kernel against float64 at
the benchmark size, then times the forward with CUDA events: 3 warm-ups, then the contenders take
turns, the median of --samples (fewer for a kernel slower than --budget-s allows, never fewer than 5). Writes linear-<gpu>-<date>.json
and .md under --out and prints the table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import playground  # noqa: E402
from playground import registry, runner, spec as specs  # noqa: E402

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


def time_events(fns: dict, samples: int, budget_s: float) -> dict[str, list[float]]:
    """Seconds per call of each function, a CUDA event pair around each call, after 3 warm-ups.

    The functions take turns, so clock drift hits all alike; one stops at `samples`, or at `budget_s`
    of its own time once it has 5 (the naive kernel at 4096^3). The inputs (192 MiB) are 3x the L2,
    so no flush is needed between calls.
    """
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {k: [] for k in fns}
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while True:
        todo = [k for k, t in times.items() if len(t) < samples and not (len(t) >= 5 and sum(t) > budget_s)]
        if not todo:
            return times
        for k in todo:
            begin.record()
            fns[k]()
            end.record()
            end.synchronize()
            times[k].append(begin.elapsed_time(end) / 1e3)


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
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--budget-s", type=float, default=8.0, help="time limit per contender")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2

    spec = specs.module(registry.find("linear"))  # also turns TF32 off for cuBLAS
    torch.backends.cuda.matmul.allow_tf32 = False
    s = args.size
    sizes = {"batch": s, "in": s, "out": s}
    x, w, b, gy = (t.cuda() for t in spec.make_inputs(sizes, torch.float32, "cpu", torch.Generator().manual_seed(0)))
    ref = torch.nn.functional.linear(x.double(), w.double(), b.double())  # the forward is what is timed here
    tol = spec.gradient_tolerances(x, w, b, gy, torch.float32)[0]
    flops = spec.flops(sizes)

    contenders = {"F.linear (cuBLAS, TF32 off)": (lambda: torch.nn.functional.linear(x, w, b), "", 0.0)}
    builds = [("cuda-naive", {})] + [("cuda-tiled", p) for p in TILES]
    for variant, params in builds:
        t0 = time.perf_counter()
        ops = playground.load("linear", variant=variant, device="cuda", params=params or None)
        label = variant + (f" ({tile_name(params)})" if params else "")
        contenders[label] = (lambda ops=ops: spec.linear(ops, x, w, b), variant, time.perf_counter() - t0)

    errors = {}
    for label, (fn, _, _) in contenders.items():
        errors[label] = (fn().double() - ref).abs().max().item()
    times = time_events({k: v[0] for k, v in contenders.items()}, args.samples, args.budget_s)
    rows = []
    for label, (fn, variant, build_s) in contenders.items():
        t, err = times[label], errors[label]
        q1, med, q3 = statistics.quantiles(t, n=4, method="inclusive")
        rows.append({"contender": label, "variant": variant, "median_ms": med * 1e3, "q1_ms": q1 * 1e3,
                     "q3_ms": q3 * 1e3, "samples": len(t), "gflops": flops / med / 1e9, "max_abs_err": err,
                     "tolerance": tol, "ok": err <= tol, "build_s": round(build_s, 1)})

    base = rows[0]["gflops"]
    naive = next(r["gflops"] for r in rows if r["variant"] == "cuda-naive")
    for r in rows:
        r["pct_of_F_linear"] = 100 * r["gflops"] / base
        r["x_naive"] = r["gflops"] / naive
    default = next(r for r in rows if r["variant"] == "cuda-tiled")
    meta = versions()
    verdict = {"tiled_default_pct_of_F_linear": default["pct_of_F_linear"], "tiled_default_x_naive": default["x_naive"],
               "target": "cuda-tiled >= 50% of F.linear and >= 5x cuda-naive",
               "met": default["pct_of_F_linear"] >= 50 and default["x_naive"] >= 5 and default["ok"]}
    record = {**meta, "size": f"{s} x {s} x {s} (batch x in x out), float32, forward", "flops": flops,
              "timing": "CUDA events around each call, 3 warm-ups, median", "rows": rows, "verdict": verdict}

    lines = [f"# linear forward on {meta['gpu']}, {s}x{s}x{s} float32", "",
             f"{meta['date']} · torch {meta['torch']} · CUDA {meta['cuda']} · {meta['nvcc']} · "
             f"driver, max SM clock: {meta['driver, max SM clock']}", "",
             "CUDA events, 3 warm-ups, median (IQR) of the samples shown; error = max |y - float64 reference| "
             f"(tolerance {tol:.2e}).", "",
             "| contender | median ms (IQR) | samples | GFLOP/s | % of F.linear | x naive | max err | check |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['contender']} | {r['median_ms']:.3f} ({r['q1_ms']:.3f}-{r['q3_ms']:.3f}) | {r['samples']} | "
                     f"{r['gflops']:,.0f} | {r['pct_of_F_linear']:.1f}% | {r['x_naive']:.1f}x | {r['max_abs_err']:.1e} | "
                     f"{'pass' if r['ok'] else 'FAIL'} |")
    lines += ["", f"Target ({verdict['target']}), default tiles: "
              f"{verdict['tiled_default_pct_of_F_linear']:.1f}% of F.linear, {verdict['tiled_default_x_naive']:.1f}x naive: "
              f"{'met' if verdict['met'] else 'NOT met'}."]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"linear-{meta['gpu'].split()[-1].lower()}-{meta['date']}"
    (args.out / f"{stem}.json").write_text(json.dumps(record, indent=1))
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if verdict["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
