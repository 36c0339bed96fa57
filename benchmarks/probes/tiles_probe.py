"""Which tiles take linear's CUDA-core top (cuda-double-buffer, float32) and its mma.sync rung (cuda-pipeline,
TF32 and bfloat16) nearest cuBLAS: each at the tile shapes worth trying, against F.linear in the same arithmetic.

    python benchmarks/probes/tiles_probe.py [--size 4096] [--runs 1] [--budget 0.5] [--jobs 8]

Builds every (variant, tiles) through kplay, --jobs at a time in child processes (each a cache hit afterwards),
checks each against float64 within the variant's tolerance, then times them with kplay's timer (CUDA events,
contenders taking turns), the median of --runs runs' medians. float32 rows are against F.linear with TF32 off
(cuda-double-buffer) or allowed (cuda-pipeline); bfloat16 rows against F.linear in bfloat16. Prints a markdown
table per arithmetic; the defaults in task.toml are the rows marked "(default)". Needs a GPU (sm_80 or later).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common

from common import spec as load_spec  # noqa: E402  it puts the repository on sys.path
from linear_gpu import DOUBLE_TILES, PIPELINE_TILES, cublas  # noqa: E402

import torch  # noqa: E402

import playground  # noqa: E402
from playground.run.timing import bench  # noqa: E402

# (arithmetic, dtype, F.linear's TF32 switch, variant, the tiles tried; {} is task.toml's default)
ROWS = [("float32", torch.float32, False, "cuda-double-buffer", [{}] + DOUBLE_TILES),
        ("TF32", torch.float32, True, "cuda-pipeline", [{}] + PIPELINE_TILES),
        ("bfloat16", torch.bfloat16, False, "cuda-pipeline", [{}] + PIPELINE_TILES)]


def build(job: tuple[str, dict]) -> str:
    """Build one (variant, tiles) into kplay's cache, in a child process; its label."""
    variant, params = job
    playground.load("linear", variant=variant, device="cuda", params=params or None)
    return label(variant, params)


def label(variant: str, params: dict) -> str:
    return variant + " " + (", ".join(f"{k}={v}" for k, v in params.items()) if params else "(default)")


def table(name: str, dtype, tf32: bool, variant: str, tiles: list[dict], args, spec) -> list[str]:
    """One arithmetic's rows: cuBLAS first, then each tile shape, median ms and % of cuBLAS."""
    s = args.size
    x, w, b, _ = spec.make_inputs({"batch": s, "in": s, "out": s}, dtype, "cpu", torch.Generator().manual_seed(0))
    x, w, b = x.cuda(), w.cuda(), b.cuda()
    ref = torch.nn.functional.linear(*(t.double() for t in (x, w, b)))
    tol = spec.product_tolerance(x, w, dtype, extra=b, tf32=tf32)
    calls, lines = {}, []
    for params in tiles:
        ops = playground.load("linear", variant=variant, device="cuda", params=params or None)
        err = (spec.linear(ops, x, w, b).double() - ref).abs().max().item()
        if err <= tol:
            calls[label(variant, params)] = lambda ops=ops: spec.linear(ops, x, w, b)
        else:
            lines.append(f"| {label(variant, params)} | wrong: max err {err:.2e} > {tol:.2e} | | |")
    calls = {"F.linear (cuBLAS)": lambda: cublas(x, w, b, tf32), **calls}
    runs = [bench(calls, "cuda", budget_s=args.budget) for _ in range(args.runs)]
    ms = {n: sorted(r[n].median_s for r in runs)[len(runs) // 2] * 1e3 for n in calls}
    tflops = 2 * s ** 3 / 1e9
    head = [f"## {name}, {s}^3\n", "| contender | median ms | TFLOP/s | % of cuBLAS |", "|---|---:|---:|---:|"]
    return head + [f"| {n} | {t:.3f} | {tflops / t:.1f} | {100 * ms['F.linear (cuBLAS)'] / t:.1f}% |"
                   for n, t in ms.items()] + lines + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--budget", type=float, default=0.5, help="seconds of timing a run")
    ap.add_argument("--jobs", type=int, default=8, help="builds at once")
    args = ap.parse_args()
    spec = load_spec("linear")
    jobs = list(dict.fromkeys((v, tuple(p.items())) for _, _, _, v, tiles in ROWS for p in tiles))
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for done in pool.map(build, [(v, dict(p)) for v, p in jobs]):
            print(f"built {done}", flush=True)
    print(f"# Tiles of linear's top CUDA rungs on {torch.cuda.get_device_name()}\n")
    print(f"made by: python benchmarks/probes/tiles_probe.py --size {args.size} --runs {args.runs} "
          f"--budget {args.budget}; kplay's timer, median of the runs' medians\n")
    for name, dtype, tf32, variant, tiles in ROWS:
        print("\n".join(table(name, dtype, tf32, variant, tiles, args, spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
