"""What memcheck and racecheck add to `kplay check` of each built-in CUDA exercise (a GPU machine).

For each exercise: `kplay start`, the solution copied in, then `kplay check DIR --no-sanitize` and `kplay check
DIR` in turns (the build cached by a first check), each a fresh process; the difference of the medians is
what the sanitizers add (target: at most 60 s).

    python3 benchmarks/check_sanitize.py [--repeat 2] [--only lltm/cuda] [--out results.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT

EXERCISES = {"sum/tree": "sum_tree.cu", "sum/first-add": "sum_first_add.cu", "sum/shuffle": "sum_shuffle.cu",
             "sum/fast": "sum_fast.cu", "linear/cuda-smem": "2_smem.cu", "linear/cuda-1d": "3_1d.cu",
             "linear/cuda-2d": "4_2d.cu", "linear/cuda-tiled": "5_tiled.cu", "linear/cuda-warptile": "6_warptile.cu",
             "linear/cuda-double-buffer": "7_double_buffer.cu", "lltm/cuda": "lltm_cuda.cu"}
CLI = [sys.executable, str(ROOT / "cli.py")]


def check(folder: Path, *extra: str) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run([*CLI, "check", str(folder), "--json", *extra], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"kplay check {folder} {' '.join(extra)}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def solution(name: str, file: str) -> str:
    """The solution as `kplay start` renders it (the family's default parameters), markers and all."""
    from playground.family import registry, render

    family, variant = name.split("/")
    fam = registry.find(family)
    return render.sources(fam, fam.variant(variant), fam.parse_params([]))[file]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", help="these exercises (comma-separated), e.g. lltm/cuda")
    args = parser.parse_args()
    chosen = {k: v for k, v in EXERCISES.items() if not args.only or k in args.only.split(",")}
    rows = ["| exercise | check --no-sanitize | check | added | sanitized cases |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, file in chosen.items():
            folder = Path(tmp) / name.replace("/", "-")
            subprocess.run([*CLI, "start", name, str(folder)], check=True, capture_output=True)
            (folder / file).write_text(solution(name, file))
            check(folder, "--no-sanitize")  # the build, once
            plain, full = [], []
            for _ in range(args.repeat):
                plain.append(check(folder, "--no-sanitize")[0])
                seconds, rec = check(folder)
                full.append(seconds)
            cases = ", ".join(f"{t['tool']} {'clean' if t['passed'] else 'FOUND'}" for t in rec.get("sanitized", []))
            a, b = statistics.median(plain), statistics.median(full)
            rows.append(f"| {name} | {a:.1f} s | {b:.1f} s | {b - a:.1f} s | {cases or rec.get('sanitizer_note')} |")
            print(rows[-1], flush=True)
    text = "\n".join(rows) + f"\n\nmedians of {args.repeat} fresh processes each, the build cached\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
