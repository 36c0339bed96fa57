"""Where a tensor-core step of linear goes wrong, if it does: each step on inputs whose products say where they
come from, and the pattern of the wrong outputs (rows mod 16, columns mod 8, tiles), so one GPU run tells a
fragment-layout bug from a pipeline one.

    python benchmarks/probes/tensor_steps_probe.py [--variants cuda-mma,...] [--dtypes bfloat16,float16,float32]

Per step, dtype and shape: y's largest error against float64 within the family's tolerance, the share of
outputs over it, and for the wrong ones the most common row % 16, column % 8, row tile (128) and column tile.
Then two structured inputs at 256 x 256 x 256: A the identity (y must be W^T's rows, exactly), and A with one
1 at column k0 (y must be W's column k0): a wrong fragment or swizzle shows as a permutation.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common

from common import spec as load_spec  # noqa: E402  it puts the repository on sys.path

import torch  # noqa: E402

import playground  # noqa: E402
from playground.family import registry  # noqa: E402

SHAPES = [(1, 1, 1), (16, 16, 16), (128, 128, 64), (256, 256, 256), (130, 260, 129), (4097, 33, 65), (64, 4096, 64)]


def pattern(wrong: torch.Tensor) -> str:
    rows, cols = wrong.nonzero(as_tuple=True)
    if rows.numel() == 0:
        return ""
    top = lambda values: ", ".join(f"{v}: {n}" for v, n in Counter(values.tolist()).most_common(3))  # noqa: E731
    return (f"first wrong (row, col) = ({rows[0].item()}, {cols[0].item()}); row % 16 {top(rows % 16)}; "
            f"col % 8 {top(cols % 8)}; row tile {top(rows // 128)}; col tile {top(cols // 128)}")


def probe(spec, ops, shape, dtype) -> str:
    sizes = dict(zip(("batch", "in", "out"), shape))
    x, w, b, _ = (t.cuda() for t in spec.make_inputs(sizes, dtype, "cpu", torch.Generator().manual_seed(0)))
    tol = spec.product_tolerance(x, w, dtype, extra=b, tf32=dtype == torch.float32)
    try:
        y = spec.linear(ops, x, w, b)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  a probe reports what the step did, whatever it was
        return f"{shape}: raised {type(e).__name__}: {str(e).splitlines()[0]}"
    err = (y.double() - torch.nn.functional.linear(x.double(), w.double(), b.double())).abs()
    wrong = err > tol
    verdict = "ok" if not wrong.any() else f"WRONG {wrong.float().mean().item():.1%} of outputs; {pattern(wrong)}"
    return f"{shape}: max err {err.max().item():.3g} (tolerance {tol:.3g}) {verdict}"


def structured(spec, ops, dtype) -> list[str]:
    """A = I: y = W^T's first rows plus b; A = e_k0: y = W[:, k0] + b. Exact in any dtype (one product each,
    W drawn in bfloat16: TF32 holds it too)."""
    n, lines = 256, []
    w = torch.randn(n, n, device="cuda").to(torch.bfloat16).to(dtype)
    b = torch.zeros(n, device="cuda", dtype=dtype)
    for name, a in (("A = I", torch.eye(n, device="cuda", dtype=dtype)),
                    ("A = e_37", torch.nn.functional.one_hot(torch.full((n,), 37, device="cuda"), n).to(dtype))):
        y = spec.linear(ops, a, w, b).float()
        want = (a.float() @ w.float().T)
        wrong = (y - want).abs() > 0
        if not wrong.any():
            lines.append(f"  {name}: exact")
            continue
        # where did each wrong output's value come from? its value's position in W, if it is one of W's
        r, c = wrong.nonzero(as_tuple=True)
        found = [(int(i), int(j), (w.float() == y[i, j]).nonzero().tolist()[:1]) for i, j in zip(r[:4], c[:4])]
        lines.append(f"  {name}: {wrong.sum().item()} wrong; {pattern(wrong)}; y[i][j] is W at {found}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="")
    ap.add_argument("--dtypes", default="bfloat16,float16,float32")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    spec, fam = load_spec("linear"), registry.find("linear")
    capability = "{}.{}".format(*torch.cuda.get_device_capability())
    names = args.variants.split(",") if args.variants else [
        v.name for v in fam.variants.values() if v.device == "cuda" and "bfloat16" in fam.dtypes_of(v)]
    for name in names:
        variant = fam.variants[name]
        if variant.arch and variant.arch.rstrip("a") != capability:
            print(f"{name}: built for sm_{variant.arch}, this GPU is {capability}: skipped")
            continue
        ops = playground.load("linear", variant=name, device="cuda")
        for dtype_name in (d for d in args.dtypes.split(",") if d in fam.dtypes_of(variant)):
            dtype = getattr(torch, dtype_name)
            print(f"== {name} {dtype_name}")
            for shape in SHAPES:
                print("  " + probe(spec, ops, shape, dtype))
            print("\n".join(structured(spec, ops, dtype)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
