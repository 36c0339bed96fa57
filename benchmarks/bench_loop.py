"""`kplay bench sum --sizes 1e3..1e7` end to end, here and in an older commit, in one run.

    python benchmarks/bench_loop.py [--runs 3] [--old 668f45c^]

The old tree is a `git worktree` in a temporary folder; both run from a warm build cache of their own (one
untimed run first), so what differs is the path around the kernels: there, a fresh worker (and so an import
of torch) per point; here, every point forked from the warm worker. A third contender, this tree with
KPLAY_ZYGOTE=0, tells the warm worker's share from the rest (a smaller CPU pool, fewer warm-up calls, a
faster tolerance). Medians of --runs, and the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ["bench", "sum", "--sizes", "1e3..1e7", "--device", "cpu"]


def timed(tree: Path, cache: str, zygote: str = "1") -> float:
    env = {**os.environ, "KPLAY_CACHE": cache, "PYTHONPATH": str(tree), "KPLAY_ZYGOTE": zygote}
    start = time.perf_counter()
    subprocess.run([sys.executable, str(tree / "cli.py"), *BENCH], check=True, capture_output=True, env=env, cwd=tree)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--old", default="668f45c^", help="the commit to compare with")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.old], check=True,
                       capture_output=True)
        try:
            trees = {"old": (old, f"{tmp}/cache-old", "1"), "now": (ROOT, f"{tmp}/cache-now", "1"),
                     "now, fresh workers": (ROOT, f"{tmp}/cache-now", "0")}
            for contender in trees.values():
                timed(*contender)  # the builds, untimed
            times = {k: [] for k in trees}
            for _ in range(args.runs):  # alternating, so drift hits all alike
                for k, contender in trees.items():
                    times[k].append(timed(*contender))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], capture_output=True)
    old_s, now_s, fresh_s = (statistics.median(times[k]) for k in trees)
    print(f"kplay {' '.join(BENCH)}, medians of {args.runs}: {args.old} {old_s:.1f} s, now {now_s:.1f} s "
          f"({old_s / now_s:.2f}x faster; target 2x); now with fresh workers {fresh_s:.1f} s (the warm worker: "
          f"{fresh_s / now_s:.2f}x)")
    print({k: [round(t, 2) for t in v] for k, v in times.items()})


if __name__ == "__main__":
    main()
