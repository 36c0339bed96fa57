"""The cost of `kplay profile sum --variant fast --n 1e8` (target <= 15 s, build excluded), beside its
floors in the same run: `import torch`, and ncu around a one-kernel Python script. Each phase of the profile
(the torch.profiler child, the ncu child) is timed from its events. Medians of --repeat runs.

    python3 benchmarks/profile_time.py [--repeat 3] [--out FILE]     # on a GPU machine with ncu
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from common import ROOT, emit, wall  # first: it puts the repository on sys.path; wall: a failing command ends the run

FLOOR = "import torch; x = torch.ones(1, device='cuda'); torch.cuda.nvtx.range_push('kplay'); x.sum(); " \
        "torch.cuda.nvtx.range_pop(); torch.cuda.synchronize()"


def phases() -> dict:
    """One profile in this process, its wall time split by the phases its events announce."""
    from playground.insight import profile
    from playground.family import request

    marks = [("start", time.perf_counter())]
    on_event = lambda event, **data: marks.append((data.get("phase", event), time.perf_counter()))
    req = request.make("sum", device="cuda", variant="fast", sizes={"n": 10**8}, mode="profile")
    profile.run(req, on_event)
    marks.append(("end", time.perf_counter()))
    spans = {}
    for (name, t0), (_, t1) in zip(marks, marks[1:]):
        spans[name] = spans.get(name, 0.0) + t1 - t0
    return spans


def main() -> None:
    from playground.compiler.toolchain import cuda_tool

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    ncu = cuda_tool("ncu")
    cli = [sys.executable, str(ROOT / "cli.py"), "profile", "sum", "--variant", "fast", "--n", "1e8"]
    wall(cli)  # the build, out of the figures
    runs = {
        "import torch": [sys.executable, "-c", "import torch"],
        "ncu around one kernel": [ncu, "--nvtx", "--nvtx-include", "kplay/", "--target-processes", "all",
                                  sys.executable, "-c", FLOOR],
        "kplay profile --no-ncu": cli + ["--no-ncu"],
        "kplay profile": cli,
    }
    lines = ["# kplay profile sum --variant fast --n 1e8: wall time, cached build", "",
             f"median of {args.repeat}", "", "| command | median s | runs |", "|---|---|---|"]
    for label, cmd in runs.items():
        times = [wall(cmd) for _ in range(args.repeat)]
        lines.append(f"| {label} | {statistics.median(times):.2f} | {', '.join(f'{t:.2f}' for t in times)} |")
    split = [phases() for _ in range(args.repeat)]
    lines += ["", "In-process phases (median s): " + ", ".join(
        f"{k} {statistics.median(s.get(k, 0.0) for s in split):.2f}" for k in split[0])]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
