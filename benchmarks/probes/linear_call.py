"""A few calls of one linear rung at one size and nothing else: what ncu profiles (`kplay run` checks at
eleven smaller sizes first, so a launch count there lands on a check). The first call warms up; profile
the second (ncu --launch-skip 1 --launch-count 1 --kernel-name regex:matmul_nt).

    python benchmarks/probes/linear_call.py cuda-pipeline bfloat16 [--size 4096] [-p NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common

from common import spec as load_spec  # noqa: E402  it puts the repository on sys.path

import torch  # noqa: E402

import playground  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant")
    ap.add_argument("dtype", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("-p", "--param", action="append", default=[], help="NAME=VALUE, a template parameter")
    args = ap.parse_args()
    spec, s = load_spec("linear"), args.size
    params = {k: int(v) for k, v in (p.split("=", 1) for p in args.param)} or None
    ops = playground.load("linear", variant=args.variant, device="cuda", params=params)
    x, w, b, _ = spec.make_inputs({"batch": s, "in": s, "out": s}, getattr(torch, args.dtype), "cpu",
                                  torch.Generator().manual_seed(0))
    x, w, b = x.cuda(), w.cuda(), b.cuda()
    for _ in range(args.calls):
        spec.linear(ops, x, w, b)
    torch.cuda.synchronize()
    print(f"{args.variant} {args.dtype} {s}^3 {params or ''}: {args.calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
