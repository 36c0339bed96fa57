"""Issue 16: torch.sum and every sum rung at 1e3 ... 1e9, timed by nvbench (pip cuda-bench) and by kplay in
the same run; the ratio of the medians. Target: within 2% at n >= 1e7, within 0.5 us below.

    python3 benchmarks/nvbench_sum.py [--out FILE]      # on a GPU machine with cuda-bench and cuda-bindings
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import playground  # noqa: E402

SIZES = [10**k for k in range(3, 10)]
RUNGS = ["tree", "first-add", "shuffle", "fast"]


def under_nvbench(calls: dict, keep: Path) -> dict:
    """{(name, n): median GPU seconds} from nvbench's cold measurement (L2 flushed, a blocking kernel first)."""
    import cuda.bench as bench

    inputs = {n: torch.randn(n, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) for n in SIZES}

    def one(state):
        n, name = state.get_int64("n"), state.get_string("contender")
        x, call = inputs[n], calls[name]
        state.add_element_count(n)
        state.add_global_memory_reads(n * 4)

        def launcher(launch):  # nvbench's stream, as PyTorch's current stream for the call
            with torch.cuda.stream(torch.cuda.ExternalStream(launch.get_stream().addressof())):
                call(x)

        state.exec(launcher)

    b = bench.register(one)
    b.add_int64_axis("n", SIZES)
    b.add_string_axis("contender", list(calls))
    b.set_timeout(3.0)
    try:
        bench.run_all_benchmarks([sys.argv[0], "--json", str(keep)])
    except SystemExit:
        pass
    found = {}
    for state in json.loads(keep.read_text())["benchmarks"][0]["states"]:
        axes = {a["name"]: a["value"] for a in state["axis_values"]}
        summaries = {s["tag"]: s for s in state.get("summaries", [])}
        summary = summaries.get("nv/cold/time/gpu/median") or summaries.get("nv/cold/time/gpu/mean")
        if not summary:
            print("no cold GPU time for", axes, "tags:", sorted(summaries), file=sys.stderr)
        else:
            found[(axes["contender"], int(axes["n"]))] = float(next(d["value"] for d in summary["data"] if "value" in d))
    return found


def under_kplay() -> dict:
    """{(name, n): median seconds} from `kplay run sum --device cuda --variant all --json` at each size: the
    command a student runs, one fresh process per size (the run's closing profiler call stays out of the next)."""
    found = {}
    for n in SIZES:
        cmd = [sys.executable, str(ROOT / "cli.py"), "run", "sum", "--device", "cuda", "--variant", "all", "--n", str(n), "--json"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"kplay failed at n = {n:.0e} (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
        rec = json.loads(done.stdout)
        found |= {(v["variant"], n): v["time"]["median_s"] for v in rec["variants"]}
        found[("torch.sum", n)] = rec["baselines"]["torch.sum"]["time"]["median_s"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    keep = Path(args.out).with_suffix(".json") if args.out else Path(tempfile.mkdtemp()) / "nvbench.json"
    mine = under_kplay()  # first, while no other process holds the GPU
    calls = {"torch.sum": torch.sum} | {v: playground.load("sum", v, device="cuda").sum for v in RUNGS}
    print({f"{name} {n:.0e}": f"{t * 1e6:.2f} us" for (name, n), t in mine.items()}, flush=True)
    theirs = under_nvbench(calls, keep)
    lines = ["# sum: kplay's timer against nvbench (cold, median GPU time), same run", "",
             f"{torch.cuda.get_device_name()}, torch {torch.__version__}", "",
             "| contender | n | kplay µs | nvbench µs | kplay ÷ nvbench | target |", "|---|---|---|---|---|---|"]
    for (name, n), ours in sorted(mine.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        nv = theirs.get((name, n))
        if nv is None:
            lines.append(f"| {name} | {n:.0e} | {ours * 1e6:,.2f} | - | - | - |")
            continue
        ok = abs(ours / nv - 1) <= 0.02 if n >= 10**7 else abs(ours - nv) <= 0.5e-6
        lines.append(f"| {name} | {n:.0e} | {ours * 1e6:,.2f} | {nv * 1e6:,.2f} | {ours / nv:.3f} | {'PASS' if ok else 'MISS'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
