"""What a change to linear's mma.sync rung (cuda-pipeline) bought, and what its TF32 rounding costs: the rung
before (a commit's snippets/linear), the rung now, and the rung now with its fragments left unrounded, side by
side in TF32 and bfloat16 at 4096^3, and the rung now at three larger block tiles (less of A and B read from L2
a multiply); cuda-double-buffer before and now in float32, each at 128 x 128 and 256 x 128 (now also at
other block_k, warp and thread tiles).
First: does cuBLAS's TF32 round its inputs or truncate them (its result against each, in float64)?

    python benchmarks/probes/pipeline_probe.py --before COMMIT [--size 4096] [--budget 0.3] [--quick] [--rows float32]

The families compared are built in a temporary folder: `linear_before` (git archive of snippets/linear at
COMMIT) and `linear_unrounded` (snippets/linear with the TF32 rungs' rounding taken out, ROUNDING: the tensor
cores then truncate, which the TF32 tolerance does not allow, unless wgmma rounds by itself; it is timed all the
same). On Hopper, the TF32 table adds cuda-warp-specialized (wgmma), rounded and not. Each contender is checked
against float64 within the variant's tolerance ("WRONG" where not), then timed with kplay's timer (CUDA events,
contenders taking turns), three runs, the median of their medians. Needs a GPU (sm_80 or later) and git.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common

from common import spec as load_spec  # noqa: E402  it puts the repository on sys.path
from linear_gpu import cublas  # noqa: E402

import torch  # noqa: E402

import playground  # noqa: E402
from playground.run.timing import bench  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# Where each TF32 rung rounds, and what stands in for it in linear_unrounded: 10_pipeline.cu's multiply, and
# 13_warp_specialized.cu's rounding warps (kept idle) and the consumers' wait for them (on the copies instead)
ROUNDING = {"10_pipeline.cu": [("TF32 ? tf32(a[i][r]) : a[i][r]", "a[i][r]"),
                               ("TF32 ? tf32(b[j][r]) : b[j][r]", "b[j][r]")],
            "13_warp_specialized.cu": [("if (TF32 && threadIdx.x >= 32) {", "if (false) {"),
                                       ("TF32 ? &ready[s] : &full[s]", "&full[s]")]}
WIDE, TALL = dict(block_m=128, block_n=256, warps_m=2, warps_n=4), dict(block_m=256, block_n=128, warps_m=4, warps_n=2)
PIPE = [(fam, "cuda-pipeline", {}) for fam in ("linear_before", "linear", "linear_unrounded")] + [
    ("linear", "cuda-pipeline", p) for p in [WIDE, TALL, dict(WIDE, stages=4)]]
WGMMA_TF32 = [(fam, "cuda-warp-specialized", {}) for fam in ("linear", "linear_unrounded")]  # Hopper's TF32 rung
# cuda-double-buffer before and now, at 128 x 128 (two blocks an SM: now the default) and 256 x 128 (one, the
# default before d92802a); now also at other steps of k, warp shapes and thread tiles
F32 = [(fam, "cuda-double-buffer", dict(block_m=m)) for fam in ("linear_before", "linear") for m in (128, 256)] + [
    ("linear", "cuda-double-buffer", p) for p in [dict(block_k=8), dict(block_k=32), dict(thread_m=4, thread_n=8),
                                                  dict(warp_m=32, warp_n=64, thread_m=4)]]
ROWS = [("float32", torch.float32, False, F32), ("TF32", torch.float32, True, PIPE + WGMMA_TF32),
        ("bfloat16", torch.bfloat16, False, PIPE)]


def archive(commit: str, into: Path, name: str) -> Path:
    """snippets/linear at `commit`, as the family folder into/name."""
    tar = subprocess.run(["git", "-C", str(REPO), "archive", commit, "snippets/linear"], capture_output=True,
                         check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into / "old", filter="data")
    (into / "old/snippets/linear").rename(into / name)
    shutil.rmtree(into / "old")
    return into / name


def unrounded(source: Path, into: Path, name: str) -> Path:
    """A copy of the family folder `source` as into/name, the TF32 rungs' inputs left unrounded (ROUNDING)."""
    subprocess.run(["cp", "-r", str(source), str(into / name)], check=True)
    for file, swaps in ROUNDING.items():
        code = (into / name / file).read_text()
        for rounds, instead in swaps:
            if rounds not in code:
                raise SystemExit(f"{file} no longer has `{rounds}`: update ROUNDING")
            code = code.replace(rounds, instead)
        (into / name / file).write_text(code)
    return into / name


def families(before: str, into: Path) -> None:
    """linear_before and linear_unrounded, each a family folder under `into`."""
    archive(before, into, "linear_before")
    unrounded(REPO / "snippets/linear", into, "linear_unrounded")


def load(job: tuple[str, str, dict], where: str):
    fam, variant, params = job
    return playground.load(fam, variant=variant, device="cuda", params=params or None,
                           paths=None if fam == "linear" else [where])


def build(args: tuple[tuple[str, str, dict], str]) -> str:
    load(*args)
    return str(args[0])


def tf32_mode() -> list[str]:
    """cuBLAS's TF32 product of random inputs against float64 products of the inputs truncated, rounded to
    nearest (ties to even) and as they are: the nearest is what it does."""
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(1024, 1024, generator=g).cuda(), torch.randn(1024, 1024, generator=g).cuda()
    y = cublas(x, w, None, True).double()

    def truncated(t):
        return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)

    def rounded(t):
        i = t.view(torch.int32)
        return ((i + 0xFFF + ((i >> 13) & 1)) & ~0x1FFF).view(torch.float32)
    return [f"cuBLAS TF32 against inputs {name}: max |diff| {(y - f(x).double() @ f(w).double().T).abs().max():.3e}"
            for name, f in [("truncated", truncated), ("rounded", rounded), ("float32", lambda t: t)]]


def table(name, dtype, tf32, jobs, args, spec, where) -> list[str]:
    s = args.size
    x, w, b, _ = spec.make_inputs({"batch": s, "in": s, "out": s}, dtype, "cpu", torch.Generator().manual_seed(0))
    x, w, b = x.cuda(), w.cuda(), b.cuda()
    ref = torch.nn.functional.linear(*(t.double() for t in (x, w, b)))
    tol = spec.product_tolerance(x, w, dtype, extra=b, tf32=tf32)
    calls, lines = {"cuBLAS": lambda: cublas(x, w, b, tf32)}, []
    for job in jobs:
        ops = load(job, where)
        label = f"{job[0]} {job[1].removeprefix('cuda-')} {job[2] or '(default)'}"
        err = (spec.linear(ops, x, w, b).double() - ref).abs().max().item()
        if err > tol:
            lines.append(f"{name} {label}: WRONG {err:.2e} > {tol:.2e} (timed all the same)")
        calls[label] = lambda ops=ops: spec.linear(ops, x, w, b)
    runs = [bench(calls, "cuda", budget_s=args.budget) for _ in range(3)]
    ms = {n: sorted(r[n].median_s for r in runs)[1] * 1e3 for n in calls}
    for n, t in ms.items():
        spread = [round(r[n].median_s * 1e3, 3) for r in runs]
        lines.append(f"{name} {s}^3 | {n:50s} | {t:.3f} ms | {2 * s ** 3 / t / 1e9:.1f} TFLOP/s | "
                     f"{100 * ms['cuBLAS'] / t:.1f}% | {spread}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the commit whose snippets/linear is `linear_before`")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of timing a run")
    ap.add_argument("--quick", action="store_true", help="the three rungs at their default tiles, TF32 and bfloat16")
    ap.add_argument("--rows", default="float32,TF32,bfloat16", help="which tables, e.g. float32")
    args = ap.parse_args()
    spec = load_spec("linear")
    rows = [(n, d, t, [j for j in js if not j[2]]) for n, d, t, js in ROWS if n != "float32"] if args.quick else ROWS
    hopper = torch.cuda.get_device_capability() == (9, 0)  # WGMMA_TF32 is built for sm_90a alone
    rows = [(n, d, t, [j for j in js if hopper or j not in WGMMA_TF32]) for n, d, t, js in rows
            if n in args.rows.split(",")]
    with tempfile.TemporaryDirectory() as where:
        families(args.before, Path(where))
        jobs = [(job, where) for job in dict.fromkeys((f, v, tuple(p.items())) for _, _, _, js in rows
                                                      for f, v, p in js)]
        jobs = [((f, v, dict(p)), w) for (f, v, p), w in jobs]
        with ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(build, jobs))
        print(f"# linear's cuda-pipeline before ({args.before}) and now, on {torch.cuda.get_device_name()}\n")
        print(f"made by: python benchmarks/probes/pipeline_probe.py --before {args.before} --size {args.size} "
              f"--budget {args.budget}{' --quick' * args.quick} --rows {args.rows}; kplay's timer, 3 runs, "
              "the median of their medians\n")
        print("\n".join(tf32_mode()), flush=True)
        for name, dtype, tf32, js in rows:
            print("\n".join(table(name, dtype, tf32, js, args, spec, where)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
