"""The matmul ladder on the GPU: F.linear (cuBLAS, TF32 off) against every CUDA rung of linear, forward, float32;
the TF32 rungs (cuda-tensor-core, cuda-pipeline, and on Hopper cuda-warp-specialized) also against F.linear with
TF32 allowed.

    python benchmarks/linear_gpu.py [--size 4096] [--runs 3] [--tiles] [--out benchmarks/results]

Builds through kplay (the same sources and flags as `kplay run`), checks each kernel against float64 at
the benchmark size, then times the forward with kplay's timer (playground.run.timing.bench: 3 warm-ups, CUDA
events, the contenders taking turns, at least 30 samples and --budget seconds, median and IQR), --runs
times; a row is the median of the runs' medians. Beside each rung, the share of cuBLAS the same step
reached in "How to optimize a CUDA Matmul Kernel for cuBLAS-like performance: a Worklog" (siboehm.com,
fp32, 4096^2, an A6000). --tiles adds cuda-tiled, cuda-double-buffer and cuda-pipeline at other tile shapes.
Writes DATE-COMMIT-GPU-linear.json and .md under --out and prints the table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, gpu_slug, results_name, spec as load_spec  # first: it puts the repository on sys.path

import torch

import playground
from playground.family import registry
from playground.run.timing import bench

# The worklog's share of cuBLAS for the step each rung takes (A6000, fp32, 4096^2); its step 2, global-memory
# coalescing (8.5%), has no rung here (the notes in snippets/linear/2_smem.cu say why).
WORKLOG = {"cuda-naive": 1.3, "cuda-smem": 12.8, "cuda-1d": 36.5, "cuda-2d": 68.7, "cuda-tiled": 78.4,
           "cuda-warptile": 93.7}
TARGET = 90.0  # the top float32 rung's share of F.linear, % (the median of the runs)
TF32_TARGET = 60.0  # the mma.sync TF32 rung's (cuda-pipeline's) share of F.linear with TF32 allowed, %

# --tiles: cuda-tiled at other shapes worth knowing about (all spill-free per ptxas -v).
TILES = [
    dict(block_m=128, block_n=128, block_k=16, thread_m=8, thread_n=8),
    dict(block_m=128, block_n=64, block_k=8, thread_m=8, thread_n=4),
    dict(block_m=256, block_n=128, block_k=8, thread_m=16, thread_n=8),
    dict(block_m=128, block_n=256, block_k=8, thread_m=8, thread_n=16),
]


# --tiles: cuda-double-buffer, the float32 top, beside its default (8 warps of 64 x 32 on 128 x 128): the
# last default, other thread and warp tiles; each obeys its constraints in task.toml and spills nothing in float32.
DOUBLE_TILES = [
    dict(block_m=256, block_n=128, block_k=16, warp_m=64, warp_n=32, thread_m=8, thread_n=4),
    dict(block_m=256, block_n=128, block_k=16, warp_m=64, warp_n=64, thread_m=8, thread_n=8),
    dict(block_m=256, block_n=128, block_k=16, warp_m=64, warp_n=32, thread_m=4, thread_n=8),
    dict(block_m=128, block_n=256, block_k=16, warp_m=32, warp_n=64, thread_m=4, thread_n=8),
    dict(block_m=256, block_n=128, block_k=16, warp_m=128, warp_n=32, thread_m=8, thread_n=4),
    dict(block_m=128, block_n=256, block_k=16, warp_m=64, warp_n=64, thread_m=8, thread_n=4),
]


# --tiles: cuda-pipeline (TF32 in float32, and bfloat16) beside its default (4 warps of 64 x 64 on 128 x 128):
# step 9's 8 warps of 64 x 32, other blocks and deeper pipelines.
PIPELINE_TILES = [
    dict(block_m=128, block_n=256, warps_m=2, warps_n=4, stages=3),
    dict(block_m=128, block_n=256, warps_m=2, warps_n=4, stages=4),
    dict(block_m=256, block_n=128, warps_m=4, warps_n=2, stages=3),
    dict(block_m=128, block_n=128, warps_m=2, warps_n=2, stages=2),
    dict(block_m=128, block_n=128, warps_m=2, warps_n=4, stages=4),
    dict(block_m=128, block_n=128, warps_m=2, warps_n=4, stages=3),
    dict(block_m=256, block_n=128, warps_m=4, warps_n=2, stages=4),
]


def tile_name(p: dict) -> str:
    if "warps_m" in p:
        return f"{p['block_m']}x{p['block_n']}, warps {p['warps_m']}x{p['warps_n']}, {p['stages']} stages"
    warp = f", warp {p['warp_m']}x{p['warp_n']}" if "warp_m" in p else ""
    return f"{p['block_m']}x{p['block_n']}x{p['block_k']}{warp}, {p['thread_m']}x{p['thread_n']}/thread"


TF32_BASE = "F.linear (cuBLAS, TF32 allowed)"  # the tensor-core rung's fair reference: the same arithmetic


def cublas(x, w, b, tf32: bool):
    """F.linear with cuBLAS's TF32 allowed or not, the switch put back after (off, torch's default)."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return torch.nn.functional.linear(x, w, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def contenders(spec, inputs, builds: list[tuple[str, dict]], device: str, fam) -> dict:
    """label -> (call, variant, build seconds, math): F.linear first (TF32 off, then allowed), then each
    (variant, params) built through kplay; math "tf32" where the inputs are rounded to TF32."""
    x, w, b = inputs
    found = {"F.linear (cuBLAS, TF32 off)": (lambda: cublas(x, w, b, False), "", 0.0, ""),
             TF32_BASE: (lambda: cublas(x, w, b, True), "", 0.0, "tf32")}
    for variant, params in builds:
        t0 = time.perf_counter()
        ops = playground.load("linear", variant=variant, device=device, params=params or None)
        label = variant + (f" ({tile_name(params)})" if params else "")
        found[label] = (lambda ops=ops: spec.linear(ops, x, w, b), variant, time.perf_counter() - t0,
                        fam.variants[variant].math)
    return found


def measure(found: dict, spec, inputs, flops: int, budget_s: float, device: str) -> list[dict]:
    """Check each contender against float64, then time them all in turns (kplay's timer), one row each.

    The slowest (cuda-naive, 0.27 s a call at 4096^3) sets the pace of the turns: 30 samples each.
    """
    ref = torch.nn.functional.linear(*(t.double() for t in inputs))  # y alone: the forward is what is timed
    tols = {m: spec.product_tolerance(inputs[0], inputs[1], torch.float32, extra=inputs[2], tf32=m == "tf32")
            for m in ("", "tf32")}  # y's bound (the forward is timed), with TF32's rounding where it is used
    errors = {label: (fn().double() - ref).abs().max().item() for label, (fn, *_) in found.items()}
    stats = bench({label: fn for label, (fn, *_) in found.items()}, device, budget_s=budget_s)
    rows = []
    for label, (_, variant, build_s, math) in found.items():
        t, err, tol = stats[label], errors[label], tols[math]
        rows.append({"contender": label, "variant": variant, "median_ms": t.median_s * 1e3, "q1_ms": t.q1_s * 1e3,
                     "q3_ms": t.q3_s * 1e3, "samples": t.samples, "method": t.method, "gflops": flops / t.median_s / 1e9,
                     "max_abs_err": err, "tolerance": tol, "ok": err <= tol, "build_s": round(build_s, 1),
                     "math": math})
    return rows


def median_of_runs(runs: list[list[dict]]) -> list[dict]:
    """One row per contender: the run whose median is the median of the runs' (its IQR and samples with it)."""
    rows = []
    for k in range(len(runs[0])):
        mine = sorted((run[k] for run in runs), key=lambda r: r["median_ms"])
        row = dict(mine[len(mine) // 2])
        row["runs_ms"] = [round(run[k]["median_ms"], 4) for run in runs]
        row["ok"] = all(r["ok"] for r in mine)
        rows.append(row)
    return rows


def summarise(rows: list[dict]) -> dict:
    """Each row's share of F.linear (the first row) and multiple of the rung before; the targets' verdict:
    each default rung no slower than the one before, the top rung at TARGET% of F.linear or more."""
    base = rows[0]["gflops"]
    tf32_base = next((r["gflops"] for r in rows if r["contender"] == TF32_BASE), None)  # None: an older record
    # the float32 rungs at their default tiles, in order; the TF32 ones are other arithmetic, compared apart
    ladder = [r for r in rows[1:] if "(" not in r["contender"] and not r.get("math")]
    for r in rows:
        r["pct_of_F_linear"] = 100 * r["gflops"] / base
        r["pct_of_F_linear_tf32"] = 100 * r["gflops"] / tf32_base if r.get("math") and tf32_base else None
        r["worklog_pct"] = WORKLOG.get(r["variant"]) if r in ladder else None
    for before, r in zip(ladder, ladder[1:]):
        r["x_before"] = r["gflops"] / before["gflops"]
    top = ladder[-1]
    climbs = all(r["x_before"] >= 1.0 for r in ladder[1:])
    tensor = [r for r in rows if r["variant"] and r.get("math") and tf32_base]
    pipeline = [r for r in tensor if r["contender"] == "cuda-pipeline"]  # its default tiles: with a TF32 baseline,
    # it must be measured
    tf32_met = not tf32_base or bool(pipeline) and all(r["pct_of_F_linear_tf32"] >= TF32_TARGET and r["ok"] for r in pipeline)
    return {"top": top["contender"], "top_pct_of_F_linear": top["pct_of_F_linear"], "climbs": climbs,
            "tensor_cores": [(r["contender"], r["pct_of_F_linear_tf32"], r["ok"]) for r in tensor],
            "target": f"each rung no slower than the one before; {top['contender']} >= {TARGET:.0f}% of F.linear; "
                      f"cuda-pipeline (TF32) >= {TF32_TARGET:.0f}% of {TF32_BASE}",
            "met": climbs and top["pct_of_F_linear"] >= TARGET and all(r["ok"] for r in ladder) and tf32_met}


def markdown(rows: list[dict], verdict: dict, meta: dict, s: int) -> list[str]:
    lines = [f"# linear forward on {meta['gpu']}, {s}x{s}x{s} float32", "",
             f"{meta['date']} · torch {meta['torch']} · CUDA {meta['cuda']} · {meta['nvcc']} · "
             f"driver, max SM clock: {meta['driver, max SM clock']}", "",
             f"{rows[0]['method']}, 3 warm-ups, contenders taking turns, median (IQR) of the samples shown; "
             f"error = max |y - float64 reference| (tolerance {rows[0]['tolerance']:.2e}; "
             f"{rows[1]['tolerance']:.2e} where TF32 rounds the inputs).", "",
             "| contender | median ms (IQR) | runs' medians, ms | GFLOP/s | % of F.linear | x rung before | worklog (A6000) | max err | check |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        before = f"{r['x_before']:.2f}x" if "x_before" in r else ""
        worklog = f"{r['worklog_pct']:.1f}%" if r.get("worklog_pct") else ""
        lines.append(f"| {r['contender']} | {r['median_ms']:.3f} ({r['q1_ms']:.3f}-{r['q3_ms']:.3f}) | "
                     f"{', '.join(f'{t:.3f}' for t in r['runs_ms'])} | {r['gflops']:,.0f} | {r['pct_of_F_linear']:.1f}% | "
                     f"{before} | {worklog} | {r['max_abs_err']:.1e} | {'pass' if r['ok'] else 'FAIL'} |")
    tensor = [f"{name}: {pct:.1f}% of {TF32_BASE} (TF32 against TF32; check {'pass' if ok else 'FAIL'} within "
              "the TF32 tolerance, spec.product_tolerance(tf32=True))." for name, pct, ok in verdict["tensor_cores"]]
    return lines + ["", f"Target ({verdict['target']}): {verdict['top']} at {verdict['top_pct_of_F_linear']:.1f}% of "
                    f"F.linear, {'every rung climbs' if verdict['climbs'] else 'a rung is slower than the one before'}: "
                    f"{'met' if verdict['met'] else 'NOT met'}.", *tensor]


def ladder_plot(record: dict, path: Path) -> None:
    """Each rung's share of F.linear as a bar, the worklog's share of cuBLAS for the same step beside it, the
    target as a line: the ladder in one picture (PNG)."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend

    rows = [r for r in record["rows"][1:] if "(" not in r["contender"] and not r.get("math")]  # float32 rungs
    fig = Figure(figsize=(8, 0.5 * len(rows) + 2.0))
    ax = fig.add_subplot()
    y = list(range(len(rows)))[::-1]  # the first rung on top
    ax.barh(y, [r["pct_of_F_linear"] for r in rows], color="#4c72b0", label=f"{record['gpu']} (this run)")
    for k, r in zip(y, rows):
        ax.text(max(101, r["pct_of_F_linear"] + 1), k, f"{r['pct_of_F_linear']:.1f}%, {r['gflops'] / 1e3:.1f} TFLOP/s",
                va="center", fontsize=8)  # a column right of the bars and the diamonds
        if r.get("worklog_pct"):
            ax.plot(r["worklog_pct"], k, "D", color="#dd8452",
                    label="worklog, A6000 (share of cuBLAS)" if k == y[0] else None)
    ax.axvline(TARGET, color="gray", linestyle="--", linewidth=1)
    ax.text(TARGET, len(rows) - 0.4, f" target {TARGET:.0f}%", color="gray", fontsize=8)
    ax.set_yticks(y, [r["contender"] for r in rows])
    ax.set_xlim(0, 135)
    ax.set_xlabel("% of F.linear (cuBLAS, TF32 off), float32 forward")
    ax.set_title(f"The matmul ladder, {record['size'].split(' (')[0]}, {record['date']}", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


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
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timing a run (at least 30 samples each)")
    ap.add_argument("--runs", type=int, default=3, help="timing runs; a row is the median of their medians")
    ap.add_argument("--tiles", action="store_true", help="also cuda-tiled, cuda-double-buffer and cuda-pipeline at other tiles")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--plot-from", type=Path, help="only draw the ladder's PNG from a JSON this script wrote")
    args = ap.parse_args()
    if args.plot_from:
        ladder_plot(json.loads(args.plot_from.read_text()), args.plot_from.with_suffix(".png"))
        return 0
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
    fam = registry.find("linear")
    hopper = torch.cuda.get_device_capability() == (9, 0)  # the sm_90a rungs (cuda-warp-specialized's TF32) too
    builds = [(v.name, {}) for v in fam.variants.values()
              if v.device == "cuda" and "float32" in fam.dtypes_of(v) and (hopper or v.arch != "9.0a")]
    builds += [("cuda-tiled", p) for p in TILES] + [("cuda-double-buffer", p) for p in DOUBLE_TILES] + \
        [("cuda-pipeline", p) for p in PIPELINE_TILES] if args.tiles else []
    found = contenders(spec, inputs, builds, "cuda", fam)
    rows = median_of_runs([measure(found, spec, inputs, flops, args.budget, "cuda") for _ in range(args.runs)])
    verdict = summarise(rows)
    meta = versions()
    record = {**meta, "size": f"{s} x {s} x {s} (batch x in x out), float32, forward", "flops": flops,
              "timing": f"{rows[0]['method']}, 3 warm-ups, contenders taking turns, median", "rows": rows, "verdict": verdict}
    lines = markdown(rows, verdict, meta, s)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = results_name("linear", gpu_slug(meta["gpu"]))
    (args.out / f"{stem}.json").write_text(json.dumps(record, indent=1))
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    try:
        ladder_plot(record, args.out / f"{stem}.png")
    except ImportError:
        print(f"no matplotlib here: draw the PNG elsewhere with --plot-from {stem}.json")
    print("\n".join(lines))
    return 0 if verdict["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
