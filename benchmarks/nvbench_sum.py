"""torch.sum and every sum rung at 1e3 ... 1e9, timed by nvbench (pip cuda-bench) and by kplay in
the same run; the ratio of the medians. Target: within 2% at n >= 1e7, within 0.5 us below.

    python3 benchmarks/nvbench_sum.py [--out FILE]      # on a GPU machine with cuda-bench and cuda-bindings
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from common import ROOT, emit, nvbench_run  # first: it puts the repository on sys.path

import playground  # noqa: E402

SIZES = [10**k for k in range(3, 10)]
RUNGS = ["tree", "first-add", "shuffle", "fast"]


class _TorchStream:
    """PyTorch's current stream as nvbench's stream provider (`__cuda_stream__`: version 0, the handle)."""

    def __cuda_stream__(self):
        return 0, torch.cuda.current_stream().cuda_stream


def under_nvbench(calls: dict, keep: Path) -> dict:
    """{(stream, name, n): median GPU seconds} from nvbench's cold measurement (L2 flushed, a blocking kernel
    first), on PyTorch's current stream, where kplay times (the legacy default stream), and on nvbench's own."""
    import cuda.bench as bench

    inputs = {n: torch.randn(n, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) for n in SIZES}

    def register(stream: str):
        def one(state):
            n, name = state.get_int64("n"), state.get_string("contender")
            x, call = inputs[n], calls[name]
            state.add_element_count(n)
            state.add_global_memory_reads(n * 4)
            if stream == "torch":
                state.set_stream(_TorchStream())

            def launcher(launch):  # nvbench's stream, as PyTorch's current stream for the call
                handle = launch.get_stream().addressof()
                with torch.cuda.stream(torch.cuda.ExternalStream(handle)) if handle else contextlib.nullcontext():
                    call(x)

            state.exec(launcher)

        b = bench.register(one)
        b.set_name(stream)
        b.add_int64_axis("n", SIZES)
        b.add_string_axis("contender", list(calls))
        b.set_timeout(2.5)

    register("torch")
    register("own")
    found = {}
    for bench_name, axes, values in nvbench_run(keep):
        median = values.get("nv/cold/time/gpu/median") or values.get("nv/cold/time/gpu/mean")
        if median is None:
            print("no cold GPU time for", bench_name, axes, "tags:", sorted(values), file=sys.stderr)
        else:
            found[(bench_name, axes["contender"], int(axes["n"]))] = float(median)
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
             f"{torch.cuda.get_device_name()}, torch {torch.__version__}. nvbench times on PyTorch's current stream, "
             "where kplay times (the target's column), and on a stream of its own (nvbench's default).", "",
             "| contender | n | kplay µs | nvbench µs | kplay ÷ nvbench | target | nvbench, own stream µs |",
             "|---|---|---|---|---|---|---|"]
    fmt = lambda t: f"{t * 1e6:,.2f}" if t is not None else "-"  # noqa: E731
    for (name, n), ours in sorted(mine.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        nv, own = theirs.get(("torch", name, n)), theirs.get(("own", name, n))
        ok = nv is not None and (abs(ours / nv - 1) <= 0.02 if n >= 10**7 else abs(ours - nv) <= 0.5e-6)
        ratio = f"{ours / nv:.3f}" if nv else "-"
        lines.append(f"| {name} | {n:.0e} | {fmt(ours)} | {fmt(nv)} | {ratio} | {'PASS' if ok else 'MISS'} | {fmt(own)} |")
    met = sum("PASS" in ln for ln in lines)
    lines += ["", f"{met} of {len(mine)} cells within target."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
