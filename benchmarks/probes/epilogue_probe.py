"""What the store of C costs the top of the tensor-core ladder: cuda-cluster and cuda-tma-store as they are, and
each with its stores of C left out (the sums still made, nothing written), against F.linear (cuBLAS).

    python benchmarks/probes/epilogue_probe.py [--runs 1] [--budget 0.5]

bfloat16, at the three shapes of benchmarks/linear_half_gpu.py; kplay's timer (CUDA events, contenders taking
turns), the median of --runs runs' medians. The copy without stores is kplay's solution ejected to a temporary
folder with its stores of C made conditional on a value the sums never take (cuda-tma-store's still stages its
sums in shared memory, with its fences and barriers); its y is not checked (it writes none). Needs the H100 or H200 (sm_90a).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common

from common import spec as load_spec  # noqa: E402  it puts the repository on sys.path

import torch  # noqa: E402

import playground  # noqa: E402
from playground.run.timing import bench  # noqa: E402

CLI = [sys.executable, str(Path(__file__).resolve().parents[2] / "cli.py")]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 1024)]


# What each step's stores of C are, and the condition that leaves them out (a value the sums never take).
STORES = {"cuda-cluster": (r"(\n\s*)(store_fragment\(C,)", r"\1if (d[4 * j] == -1234.5f) \2"),
          "cuda-tma-store": (r"(\n\s*)(for \(int box = 0;)", r"\1if (d[0] == -1234.5f) \2")}


def without_stores(folder: Path, variant: str) -> Path:
    """The variant's solution in folder, its stores of C behind a condition that never holds."""
    subprocess.run([*CLI, "eject", "linear", str(folder), "--variant", variant, "--solution"], check=True,
                   capture_output=True)
    source = next(folder.glob(f"*_{variant.removeprefix('cuda-').replace('-', '_')}.cu"))
    text, count = re.subn(*STORES[variant], source.read_text())
    assert count == 1, f"expected one store of C in {source.name}, found {count}"
    source.write_text(text)
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--budget", type=float, default=0.5, help="seconds of timing a run")
    args = ap.parse_args()
    spec = load_spec("linear")
    with tempfile.TemporaryDirectory() as tmp:
        ops = {}
        for variant in STORES:
            ops[variant] = playground.load("linear", variant=variant, device="cuda")
            folder = without_stores(Path(tmp) / variant, variant)
            ops[f"{variant}, no stores"] = playground.load(str(folder), variant=variant, device="cuda")
    print(f"# The store of C at the top of the ladder, bfloat16, {torch.cuda.get_device_name()}\n")
    print("made by: python benchmarks/probes/epilogue_probe.py "
          f"--runs {args.runs} --budget {args.budget}; median ms, and % of cuBLAS\n")
    print("| (batch, in, out) | F.linear (cuBLAS) | " + " | ".join(ops) + " |")
    print("|---|" + "---:|" * (len(ops) + 1))
    for shape in SHAPES:
        sizes = dict(zip(("batch", "in", "out"), shape))
        x, w, b, _ = spec.make_inputs(sizes, torch.bfloat16, "cpu", torch.Generator().manual_seed(0))
        x, w, b = x.cuda(), w.cuda(), b.cuda()
        calls = {"cuBLAS": lambda: torch.nn.functional.linear(x, w, b)}
        calls |= {name: (lambda o=o: spec.linear(o, x, w, b)) for name, o in ops.items()}
        runs = [bench(calls, "cuda", budget_s=args.budget) for _ in range(args.runs)]
        ms = {name: sorted(r[name].median_s for r in runs)[len(runs) // 2] * 1e3 for name in calls}
        cells = [f"{ms[name]:.3f} ({100 * ms['cuBLAS'] / ms[name]:.1f}%)" for name in ops]
        print(f"| {shape} | {ms['cuBLAS']:.3f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
