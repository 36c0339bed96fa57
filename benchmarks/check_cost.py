"""What the defences against gamed kernels cost a `kplay check` (target: at most 15%).

Two checkouts side by side: this one and an older one (`--base`, e.g. a `git archive` of the commit before),
each starting its own sum exercise (cpp here; with a GPU, fast) with the solution copied in, then `kplay check`
of each in turn, whole processes, the median of `--runs` pairs and their ratio.

    git archive 91a7fac | (mkdir -p .base && tar x -C .base)
    python benchmarks/check_cost.py --base .base [--runs 7] [--out FILE]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, median_of, timed


def started(tree: Path, variant: str, folder: Path) -> Path:
    """An exercise started by `tree`'s kplay, its solution (as `tree`'s eject renders it) copied in."""
    kplay = [sys.executable, str(tree / "cli.py")]
    subprocess.run([*kplay, "start", f"sum/{variant}", str(folder)], check=True, capture_output=True)
    rendered = folder.parent / f"{folder.name}-solution"
    subprocess.run([*kplay, "eject", "sum", str(rendered), "--variant", variant, "--solution"], check=True,
                   capture_output=True)
    solution = {"cpp": "sum.cpp", "fast": "sum_fast.cu"}[variant]
    shutil.copy(rendered / solution, folder / solution)
    return folder


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", default=None)
    a = parser.parse_args()
    gpu = torch.cuda.is_available()
    variant = "fast" if gpu else "cpp"
    extra = ["--no-sanitize"] if gpu else []  # the same in both: memcheck and racecheck are not what changed
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": a.base.resolve(), "now": ROOT}
        folders = {k: started(t, variant, Path(tmp) / k) for k, t in trees.items()}
        cmds = {k: [sys.executable, str(t / "cli.py"), "check", str(folders[k]), *extra] for k, t in trees.items()}
        for cmd in cmds.values():  # the builds, untimed
            timed(cmd)
        seconds = {k: runs.walls for k, runs in median_of(a.runs, cmds).items()}
    ratios = [n / b for n, b in zip(seconds["now"], seconds["before"])]
    where = torch.cuda.get_device_name() if gpu else "CPU"
    lines = [f"# kplay check of sum/{variant} ({where}), before and after the defences",
             "", f"`python benchmarks/check_cost.py --base BEFORE --runs {a.runs}`: whole `kplay check` processes in turn "
             f"({' '.join(extra) or 'as a student runs it'}), cached builds.", "",
             "| | min | median | max |", "|---|---:|---:|---:|"]
    for k, s in seconds.items():
        lines.append(f"| {k} (s) | {min(s):.2f} | {statistics.median(s):.2f} | {max(s):.2f} |")
    lines.append(f"| now / before | {min(ratios):.3f} | {statistics.median(ratios):.3f} | {max(ratios):.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
