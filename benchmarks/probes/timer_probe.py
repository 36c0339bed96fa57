"""Why kplay's CLI read sum 2-3x slower than nvbench in benchmarks/nvbench_sum.py: the same
`kplay run sum --device cuda --json`, alone on the GPU and beside a process that only holds an idle CUDA
context (as nvbench_sum.py's parent did), and kplay's timer called in-process as sum_gpu.py does.

    python3 benchmarks/timer_probe.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common
from common import ROOT, emit  # first: it puts the repository on sys.path

IDLE = "import sys, torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); print('ready', flush=True); sys.stdin.read()"


def cli(n: int, variant: str) -> dict:
    cmd = [sys.executable, str(ROOT / "cli.py"), "run", "sum", "--device", "cuda", "--variant", variant, "--n", str(n), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        return {"error": done.stderr[-500:] + done.stdout[-500:]}
    rec = json.loads(done.stdout)
    found = {v["variant"]: v["time"] for v in rec["variants"]} | {"torch.sum": rec["baselines"]["torch.sum"]["time"]}
    return {k: {f: t.get(f) for f in ("median_s", "q1_s", "q3_s", "samples", "dropped", "clock_mhz", "tail_s")}
            for k, t in found.items()}


def in_process(n: int) -> dict:
    import torch

    import playground
    from playground.run.timing import bench

    fast = playground.load("sum", "fast", device="cuda").sum
    x = torch.randn(n, device="cuda")
    stats = bench({"fast": lambda: fast(x), "torch.sum": lambda: torch.sum(x)}, "cuda", budget_s=0.5)
    return {k: {"median_s": s.median_s, "samples": s.samples} for k, s in stats.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = {}
    for n in (10**5, 10**7, 10**8):
        rows[f"alone fast {n:.0e}"] = cli(n, "fast")
    rows["alone all 1e7"] = cli(10**7, "all")
    idle = subprocess.Popen([sys.executable, "-c", IDLE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    idle.stdout.readline()
    try:
        for n in (10**5, 10**7, 10**8):
            rows[f"beside an idle context: fast {n:.0e}"] = cli(n, "fast")
        rows["beside an idle context: all 1e7"] = cli(10**7, "all")
    finally:
        idle.stdin.close()
        idle.wait()
    time.sleep(1)
    for n in (10**5, 10**7, 10**8):
        rows[f"in-process bench {n:.0e}"] = in_process(n)
    lines = ["# kplay's timer: alone, beside an idle CUDA context, in-process (median µs)", ""]
    for label, found in rows.items():
        if "error" in found:
            lines.append(f"- {label}: error {found['error']}")
            continue
        lines.append(f"- {label}: " + ", ".join(f"{k} {t['median_s'] * 1e6:.2f}" for k, t in found.items()))
    emit("\n".join(lines) + "\n\n" + json.dumps(rows, indent=1) + "\n", args.out)


if __name__ == "__main__":
    main()
