"""Does the sandbox cost a GPU kernel anything, and do the GPU tools work inside it?

The same `kplay run ... --json` with and without `--sandbox`, in turn, `--runs` rounds: each rung's
median in and out of the sandbox, the ratio, and record.same's verdict against the larger noise. Then, in
the sandbox, the tools a grade or a student uses: compute-sanitizer (memcheck), ncu (`kplay profile`) and
`kplay show --sass` (cuobjdump), each one's exit code and last line.

    python3 benchmarks/sandbox_gpu.py [--runs 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from common import ROOT

CASES = {"sum 1e8": ["sum", "--variant", "all", "--n", "1e8"],
         "lltm": ["lltm", "--variant", "cuda"]}
TOOLS = {"memcheck": ["run", "sum", "--variant", "fast", "--n", "1e6", "--sanitize", "memcheck"],
         "ncu": ["profile", "sum", "--variant", "fast", "--n", "1e7"],
         "cuobjdump": ["show", "sum", "--variant", "fast", "--sass", "--solution"]}
VERDICTS = {"memcheck": "memcheck:", "ncu": "ncu", "cuobjdump": "functions"}  # the line that says how the tool did
KPLAY = [sys.executable, str(ROOT / "cli.py")]


def medians(args: list[str], boxed: bool, device: str) -> dict[str, tuple[float, float]]:
    """One run: each variant's kernel median and noise."""
    cmd = [*KPLAY, "run", *args, "--device", device, "--json", *(["--sandbox"] if boxed else [])]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}{done.stdout[-3000:]}")
    record = json.loads(done.stdout)
    return {v["variant"]: (v["time"]["median_s"], v["time"]["noise"]) for v in record["variants"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--cases", default=",".join(CASES), help="which cases, by name (comma-separated; none: the tools only)")
    parser.add_argument("--device", default="cuda", help="cpu: sum's CPU rungs at 1e6, no tools (a dry run)")
    a = parser.parse_args()
    import torch

    gpu = a.device == "cuda"
    cases, tools = ({k: CASES[k] for k in a.cases.split(",") if k != "none"}, TOOLS) if gpu else ({"sum 1e6": ["sum", "--variant", "all", "--n", "1e6"]}, {})
    where = f"{torch.cuda.get_device_name() if gpu else 'CPU'}; torch {torch.__version__}"
    lines = [f"# Kernels in and out of the sandbox ({where})", "",
             (f"`python3 benchmarks/sandbox_gpu.py --runs {a.runs}`: `kplay run ... --device DEVICE --json` with and "
              "without `--sandbox`, in turn; the median of each rung's run medians; noise, the larger relative "
              "standard deviation of a run's samples; same, whether the two medians differ by less than that "
              "noise (the rule `kplay` uses)."), "",
             "| case | rung | outside | inside | inside / outside | noise | same |", "|---|---|---:|---:|---:|---:|---|"]
    for name, args in cases.items():
        for boxed in (False, True):  # the builds (the sandbox's own cache too), untimed
            medians(args, boxed, a.device)
        runs = {False: [], True: []}
        for _ in range(a.runs):
            for boxed in (False, True):
                runs[boxed].append(medians(args, boxed, a.device))
        for rung in runs[False][0]:
            out, inside = (statistics.median(r[rung][0] for r in runs[b]) for b in (False, True))
            noise = max(r[rung][1] for b in runs for r in runs[b])
            same = abs(inside - out) < noise * min(inside, out)
            lines.append(f"| {name} | {rung} | {out * 1e6:.1f} µs | {inside * 1e6:.1f} µs | {inside / out:.3f} | "
                         f"{noise:.3f} | {'yes' if same else 'no'} |")
            print(lines[-1], flush=True)
    lines += ["", "In the sandbox (`KPLAY_SANDBOX=1`):", "", "| tool | command | exit | its verdict |", "|---|---|---:|---|"]
    for tool, args in tools.items():
        done = subprocess.run([*KPLAY, *args], capture_output=True, text=True, env={**os.environ, "KPLAY_SANDBOX": "1"})
        said = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        verdict = [line for line in done.stdout.splitlines() if VERDICTS[tool] in line] or ["(no such line)"]
        lines.append(f"| {tool} | `kplay {' '.join(args)}` | {done.returncode} | {verdict[-1].strip()[:100]} |")
        print(lines[-1], flush=True)
        print("\n".join(said[-40:]), file=sys.stderr)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
