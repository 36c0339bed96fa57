"""Does changing the input before every timed call move an honest kernel's time?

Two checkouts side by side: this one and an older one (`--base`, a `git archive` of the commit before the
changes), each running the same `kplay run --json` in turn, `--runs` rounds: the kernel's and the
reference's medians, their noise and spread, and the ratio now / before.

    git archive 91a7fac | (mkdir -p .base && tar x -C .base)
    python benchmarks/timing_change.py --base .base [--runs 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from common import ROOT, timed

GPU_CASES = {"sum fast 1e8": ["sum", "--variant", "fast", "--n", "1e8"],
             "linear cuda-double-buffer 4096³": ["linear", "--variant", "cuda-double-buffer", "--batch", "4096",
                                                 "--in", "4096", "--out", "4096"]}
CPU_CASES = {"sum cpp 1e7": ["sum", "--variant", "cpp", "--n", "1e7"],
             "linear cpp 512³": ["linear", "--variant", "cpp", "--batch", "512", "--in", "512", "--out", "512"]}


def times(tree: Path, args: list[str], device: str) -> tuple[float, float, float]:
    """One run's kernel median, its noise, and the reference's median."""
    _, out = timed([sys.executable, str(tree / "cli.py"), "run", *args, "--device", device, "--json"])
    record = json.loads(out)
    kernel = record["variants"][0]["time"]
    reference = next(iter(record["baselines"].values()))["time"]
    return kernel["median_s"], kernel["noise"], reference["median_s"]


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None)
    a = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cases = GPU_CASES if device == "cuda" else CPU_CASES
    trees = {"before": a.base.resolve(), "now": ROOT}
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    lines = [f"# An honest kernel's time, before and after the timed inputs change per call ({where})", "",
             (f"`python benchmarks/timing_change.py --base BEFORE --runs {a.runs}`: `kplay run ... --json` of each "
             "checkout in turn: the median over runs of each run's median; noise, the largest relative standard "
             "deviation of a run's samples; spread, (max - min) / median of one checkout's run medians, the larger "
             "of the two."), "",
             "| case | kernel before | kernel now | now / before | noise | spread | reference now / before |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, args in cases.items():
        for tree in trees.values():  # the builds, untimed
            times(tree, args, device)
        got = {k: [] for k in trees}
        for _ in range(a.runs):
            for k, tree in trees.items():
                got[k].append(times(tree, args, device))
        med = {k: statistics.median(r[0] for r in runs) for k, runs in got.items()}
        ref = {k: statistics.median(r[2] for r in runs) for k, runs in got.items()}
        noise = max(r[1] for runs in got.values() for r in runs)
        spread = max((max(r[0] for r in runs) - min(r[0] for r in runs)) / med[k] for k, runs in got.items())
        lines.append(f"| {name} | {med['before'] * 1e6:.1f} µs | {med['now'] * 1e6:.1f} µs | "
                     f"{med['now'] / med['before']:.3f} | {noise:.3f} | {spread:.3f} | {ref['now'] / ref['before']:.3f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
