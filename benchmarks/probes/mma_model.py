"""Why cuda-pipeline stops where it does: a model from its SASS and figures already measured. Each instruction a
pass of its main loop issues besides the mma is taken to cost one issue cycle that no mma can use. With o such
instructions for each mma, and c cycles between two mma on an SM sub-partition at the register-only ceiling,
the kernel runs at the ceiling divided by 1 + o / c (occupancy cancels: every warp's pass costs the same).
Fitted on a commit already timed (k: measured over model, one for each kernel), it predicts the rung now.

    python benchmarks/probes/mma_model.py --at COMMIT --measured FILE --ceiling FILE [--out FILE]

--measured: pipeline_probe.py's results at COMMIT (its rows `linear pipeline (default)` in TF32 and bfloat16,
`linear_unrounded pipeline (default)` in TF32, and cuBLAS). --ceiling: mma_ceiling_probe.py's results (the rows
at 8 warps an SM, and the clock and SMs of its dense peak). No GPU: nvcc builds, nvdisasm reads (sass_loop.py's
hot_pass: the route of a step in the middle of a large problem).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common, sass_loop

from common import emit  # noqa: E402  it puts the repository on sys.path
from pipeline_probe import REPO, archive, unrounded  # noqa: E402
from sass_loop import hot_pass, kind, main_loop, opcode  # noqa: E402

from playground.compiler import disasm  # noqa: E402
from playground.family import registry  # noqa: E402

FLOPS = {"TF32": 2 * 16 * 8 * 8, "bfloat16": 2 * 16 * 8 * 16}  # one mma.sync: m16n8k8, m16n8k16
KERNELS = [("TF32", "", "<float>"), ("TF32", "_unrounded", "<float>"), ("bfloat16", "", "<__nv_bfloat16>")]
TARGET = 0.60  # of cuBLAS, TF32: the mma.sync rung's


def ceiling(text: str) -> dict[str, float]:
    """c for each arithmetic: cycles between two mma on one SM sub-partition, at the 8-warp ceiling."""
    mhz, sms = re.search(r"(\d+) SMs x ([\d,]+) MHz", text).group(2, 1)
    rate = {a: float(t) for a, t in re.findall(r"^\| (\w+) \| mma\.sync \S+ \| 8 \| ([\d.]+) \|", text, re.M)}
    return {a: float(mhz.replace(",", "")) * 1e6 * 4 * int(sms) * FLOPS[a] / (rate[a] * 1e12) for a in FLOPS} | {
        f"{a} TFLOP/s": rate[a] for a in FLOPS}


def measured(text: str) -> dict[tuple[str, str], float]:
    """TFLOP/s by (arithmetic, contender) from pipeline_probe.py's rows."""
    rows = re.findall(r"^(\w+) \d+\^3 \| (.+?) +\| [\d.]+ ms \| ([\d.]+) TFLOP/s", text, re.M)
    return {(a, who): float(t) for a, who, t in rows}


def others_per_mma(family: str, kernel: str, where: str) -> tuple[float, float]:
    """On the hot route through the main loop of `kernel` in `family`: (instructions - mma) / mma, and
    conversions / mma."""
    fam = registry.find(family, [where])
    found, _, _ = disasm.compiled("sass", fam, fam.variants["cuda-pipeline"], {}, lambda *_, **__: None)
    code = next([c for g in f.groups for c in g.code] for f in found if kernel in f.name)
    route = [kind(opcode(c)) for c in hot_pass(main_loop(code, labels=True))]
    mma = route.count("math")
    return (len(route) - mma) / mma, route.count("convert") / mma


def model(ceiling_tflops: float, c: float, o: float) -> float:
    return ceiling_tflops / (1 + o / c)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--at", required=True, help="the commit --measured timed")
    ap.add_argument("--measured", required=True)
    ap.add_argument("--ceiling", required=True)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cs, times = ceiling(Path(args.ceiling).read_text()), measured(Path(args.measured).read_text())
    with tempfile.TemporaryDirectory() as where:
        then = archive(args.at, Path(where), "linear_then")
        unrounded(then, Path(where), "linear_then_unrounded")
        unrounded(REPO / "snippets/linear", Path(where), "linear_unrounded")
        lines, ks = [], []
        for arith, suffix, kernel in KERNELS:
            c, top = cs[arith], cs[f"{arith} TFLOP/s"]
            (o_then, _), (o_now, converts) = (others_per_mma(f"linear{when}{suffix}", kernel, where)
                                              for when in ("_then", ""))
            got, cublas = times[(arith, f"linear{suffix} pipeline (default)")], times[(arith, "cuBLAS")]
            k = got / model(top, c, o_then)
            ks.append(k)
            now = k * model(top, c, o_now)
            lines.append(f"| {arith}{suffix.replace('_', ' ')} | {o_then:.2f} | {model(top, c, o_then):.1f} | "
                         f"{got:.1f} | {k:.3f} | {o_now:.2f} ({converts:.2f} conversions) | {now:.1f} | "
                         f"{100 * now / cublas:.1f}% |")
    c, top, cublas = cs["TF32"], cs["TF32 TFLOP/s"], times[("TF32", "cuBLAS")]
    need = c * (max(ks) * top / (TARGET * cublas) - 1)  # o at which k * model = TARGET * cuBLAS, at the best k
    text = "\n".join([
        f"# cuda-pipeline's main loop against the issue model: {args.at} (timed) and now (predicted)", "",
        f"made by: python benchmarks/probes/mma_model.py --at {args.at} --measured {args.measured} --ceiling "
        f"{args.ceiling}; SASS by nvcc and nvdisasm, no GPU. o: instructions besides the mma for each mma, on the "
        "hot route through the loop; model: ceiling / (1 + o / c); k: measured / model at the commit timed; "
        "now: k x model with o now.", "",
        f"c, cycles between two mma on one SM sub-partition at the 8-warp ceiling: TF32 {cs['TF32']:.2f}, bfloat16 "
        f"{cs['bfloat16']:.2f}", "",
        "| kernel | o then | model, TFLOP/s | measured | k | o now | now, TFLOP/s | of cuBLAS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|", *lines, "",
        f"{100 * TARGET:.0f}% of cuBLAS in TF32 ({TARGET * cublas:.1f} TFLOP/s) needs o <= {need:.2f} at the best k "
        f"({max(ks):.3f}), the rounding's conversions included."])
    emit(text + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
