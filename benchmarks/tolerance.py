"""How tight each family's tolerance is: the tolerance over the largest error that correct computations make.

For each family, dtype and distribution, over many seeds: the family's own variants that run here (CPU: cpp;
GPU: every CUDA rung too), PyTorch's op in the dtype, and, for sum, a pairwise tree and the error model's
worst case (runs of spec.BLOCK summed in order, then a tree), each against the float64 reference. Written:
the largest error over the tolerance (must stay below 1: a false failure), and its inverse, the slack
(the target: under 100x).

    python benchmarks/tolerance.py [--seeds 200] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import math
import platform
import time

import common  # noqa: F401  (the checkout on sys.path)
import torch
import torch.nn.functional as F

import playground
from playground.family import registry
from playground.family import spec as specs
from playground.run.check import as_tuple, make_inputs

SIZES = {"sum": [{"n": 1000}, {"n": 1_000_003}], "linear": [{"batch": 64, "in": 512, "out": 64}],
         "lltm": [{"batch": 16, "features": 32, "state": 128}]}


def pairwise(x):
    """A pairwise tree in x's dtype."""
    x = x.flatten()
    while x.numel() > 1:
        if x.numel() % 2:
            x = torch.cat([x, x.new_zeros(1)])
        x = x[0::2] + x[1::2]
    return x[0] if x.numel() else x.new_zeros(())


def runs_then_tree(x, block: int):
    """The error model's worst case: runs of `block` elements added in order in x's dtype, then a tree."""
    n = x.numel()
    rows = -(-n // block)
    padded = torch.cat([x.flatten(), x.new_zeros(rows * block - n)]).view(rows, block)
    acc = torch.zeros(rows, dtype=x.dtype, device=x.device)
    for j in range(block):
        acc += padded[:, j]
    return pairwise(acc)


def computations(name: str, fam, spec, device: str, dtype: str) -> dict:
    """{label: (fn(*inputs) -> outputs, its math)}: the family's variants here that take the dtype, PyTorch's op,
    and on the CPU sum's own trees (IEEE arithmetic: the same on any device)."""
    found = {}
    for v in (v for v in fam.variants_for(device) if dtype in fam.dtypes_of(v)):
        ops = playground.load(name, v.name, device)
        found[v.name] = (lambda *x, ops=ops, v=v.name: spec.call(ops, v, *x)), v.math
    mod = specs.module(fam)
    if name == "sum":
        found["torch.sum"] = torch.sum, ""
        if device == "cpu":
            found |= {"pairwise": (pairwise, ""), f"runs of {mod.BLOCK}": (lambda x: runs_then_tree(x, mod.BLOCK), "")}
    elif name == "linear":
        found["F.linear"] = (lambda *x: mod.gradients(F.linear, *x)), ""
    elif name == "lltm":
        found["python"] = (lambda *x: mod.forward_backward(mod.lltm_reference, *x)), ""
    return found


def measure(name: str, seeds: int, device: str, dtypes: list[str] | None = None) -> list[dict]:
    fam = registry.find(name)
    spec = specs.load(fam)
    rows = []
    for sizes in SIZES[name]:
        for dtype_name in (d for d in fam.dtypes if not dtypes or d in dtypes):
            dtype = getattr(torch, dtype_name)
            for dist in fam.distributions:
                worst, labels, failures, t0 = 0.0, {}, 0, time.perf_counter()
                fns = computations(name, fam, spec, device, dtype_name)
                for seed in range(seeds):
                    inputs = make_inputs(spec, sizes, dtype, device, seed, dist)
                    ref = as_tuple(spec.reference(*inputs))
                    by_math = {m: as_tuple(specs.tolerance_for(spec, inputs, dtype, m)[0]) for m in {m for _, m in fns.values()}}
                    for label, (fn, m) in fns.items():
                        tols = by_math[m] * len(ref) if len(by_math[m]) == 1 else by_math[m]
                        out = fn(*inputs)
                        if out is None:
                            continue
                        for o, r, t in zip(as_tuple(out), ref, tols):
                            if o is None:
                                continue
                            err = (o.detach().double() - r.detach().double()).abs().max().item()
                            share = err / t if t else (0.0 if err == 0 else math.inf)
                            failures += share > 1
                            if share > worst:
                                worst, labels = share, {"by": label, "seed": seed}
                rows.append({"family": name, "sizes": sizes, "dtype": dtype_name, "dist": dist, "worst": worst,
                             "failures": failures, **labels, "seconds": time.perf_counter() - t0})
                print(_row(rows[-1]), flush=True)
    return rows


def _row(r: dict) -> str:
    sizes = " ".join(f"{k}={v:,}" for k, v in r["sizes"].items())
    slack = f"{1 / r['worst']:,.0f}x" if r["worst"] else "exact"
    return (f"| {r['family']} | {sizes} | {r['dtype']} | {r['dist']} | {r['worst']:.3g} | {slack} | "
            f"{r['failures']} | {r.get('by', '-')} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--families", default="sum,linear,lltm")
    parser.add_argument("--dtypes", default="", help="only these (comma-separated; default: each family's)")
    parser.add_argument("--out", default=None, help="a results file (default: printed only)")
    a = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    head = ["| family | sizes | dtype | data | largest error / tolerance | tolerance / largest error | false failures | by |",
            "|---|---|---|---|---:|---:|---:|---|"]
    print("\n".join(head))
    rows = [r for name in a.families.split(",") for r in measure(name, a.seeds, a.device, [d for d in a.dtypes.split(",") if d])]
    if a.out:
        gpu = torch.cuda.get_device_name() if a.device == "cuda" else platform.processor() or platform.machine()
        text = [f"# Tolerance over the largest error of correct computations ({a.device}: {gpu}; torch {torch.__version__})",
                "", f"`python benchmarks/tolerance.py --seeds {a.seeds} --device {a.device} --families {a.families}"
                f"{' --dtypes ' + a.dtypes if a.dtypes else ''}`: {a.seeds} seeds, every "
                "distribution each family declares. A false failure is an error over the tolerance.", "", *head,
                *map(_row, rows), "", f"false failures in all: {sum(r['failures'] for r in rows)}"]
        with open(a.out, "w") as f:
            f.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
