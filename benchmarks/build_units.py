"""Where a CUDA rebuild spends its time: each unit of a kplay build compiled alone, and the .cu again with
one of kplay's nvcc flags left out at a time.

    python benchmarks/build_units.py [--family sum] [--variant fast] [--repeat 3] [--out FILE]

It builds the variant through kplay (no GPU needed), reads the build's own build.ninja (the very commands
ninja ran: the binding's C++ compile, the .cu's nvcc compile, the link), and times each command alone, the
median of --repeat runs, beside the floor of starting a compiler at all (`nvcc --version`, `c++
--version`). Then the .cu compile without --keep, without -lineinfo, without --resource-usage, and with the
host side at -O0 (none of which changes the kernel's SASS but -lineinfo's line table): which flag costs what.
Last, the .cu's compile by nvcc's own phases (its --time report): preprocessing, cudafe++, cicc, ptxas, the
host compiler.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, emit  # first: it puts the repository on sys.path

DROPS = {"without --keep": lambda a: [x for x in a if x != "--keep" and not x.startswith("--keep-dir")],
         "without -lineinfo": lambda a: [x for x in a if x != "-lineinfo"],
         "without --resource-usage": lambda a: [x for x in a if x != "--resource-usage"],
         "host side at -O0": lambda a: [*a, "-Xcompiler", "-O0"]}


def ninja_commands(build: Path) -> dict[str, list[str]]:
    """{'compile': argv, 'cuda_compile': argv, 'link': argv} from a build folder's build.ninja, variables expanded."""
    text = (build / "build.ninja").read_text()
    var = dict(re.findall(r"^(\w+) = (.*)$", text, re.M))
    rules = dict(re.findall(r"^rule (\w+)\n(?:  .*\n)*?  command = (.*)$", text, re.M))
    found = {}
    for out, rule, ins in re.findall(r"^build (\S+): (\w+) (.*)$", text, re.M):
        line = rules[rule].replace("$out.d", f"{out}.d").replace("$out", out).replace("$in", ins)
        line = re.sub(r"\$(\w+)", lambda m: var.get(m.group(1), ""), line)
        found.setdefault(rule, shlex.split(line))
    return found


def seconds(argv: list[str], cwd: Path, repeat: int) -> float:
    """The median wall time of argv run `repeat` times in cwd; a failure stops the benchmark."""
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
        runs.append(time.perf_counter() - t)
        if done.returncode:
            sys.exit(f"{argv[0]} failed:\n{done.stderr[-2000:]}")
    return statistics.median(runs)


def nvcc_phases(argv: list[str], cwd: Path) -> list[tuple[str, float]]:
    """(phase, milliseconds) of one nvcc run, from its own --time report: preprocessing, cudafe++, cicc,
    ptxas, fatbinary, the host compiler."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "phases.csv"
        done = subprocess.run([*argv, "--time", str(report)], cwd=cwd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"nvcc --time failed:\n{done.stderr[-2000:]}")
        rows = [[c.strip() for c in line.split(",")] for line in report.read_text().splitlines()[1:]]
    return [(r[1], float(r[6])) for r in rows if len(r) > 7 and r[7] == "ms"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="sum")
    ap.add_argument("--variant", default="fast")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KPLAY_CACHE"] = tmp
        import playground

        playground.load(args.family, variant=args.variant, device="cuda")
        build = next(Path(tmp).glob(f"kplay_{args.family}_*/build.ninja")).parent
        cmds = ninja_commands(build)
        rows = [("`nvcc --version` (starting nvcc)", seconds([cmds["cuda_compile"][0], "--version"], build, args.repeat)),
                ("`c++ --version` (starting the C++ compiler)", seconds([cmds["compile"][0], "--version"], build, args.repeat)),
                ("the binding (C++)", seconds(cmds["compile"], build, args.repeat)),
                ("the .cu (nvcc), as kplay builds it", seconds(cmds["cuda_compile"], build, args.repeat))]
        rows += [(f"the .cu {what}", seconds(drop(cmds["cuda_compile"]), build, args.repeat)) for what, drop in DROPS.items()]
        rows.append(("the link", seconds(cmds["link"], build, args.repeat)))
        phases = nvcc_phases(cmds["cuda_compile"], build)
    import torch

    lines = [f"# One build's units, timed alone: {args.family}/{args.variant}", "",
             f"{os.cpu_count()} cores, torch {torch.__version__}, "
             f"GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}; median of {args.repeat}", "",
             "| command | seconds |", "|---|---|", *(f"| {what} | {s:.2f} |" for what, s in rows), "",
             "The .cu's compile by nvcc's own phases (`nvcc --time`, one run):", "",
             "| phase | ms |", "|---|---|", *(f"| {name} | {ms:.0f} |" for name, ms in phases)]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
