"""Issue 2's speed targets on this machine, each measured side by side with its reference in one run.

    python benchmarks/cpu.py [--skip-default-compile] [--out benchmarks/results/cpu.md]

1. CPU sum throughput against torch.sum at n = 1e7 and 1e8 (kernel and torch.sum take turns).
2. Cold compile of each CPU snippet (a fresh cache), next to load_inline's default path
   (<torch/extension.h> + pybind) for a one-line op.
3. A warm `kplay run sum --n 1e7` end to end, next to `python -c "import torch"`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sum_throughput(lines: list[str]) -> None:
    import playground

    lines += ["## CPU sum vs torch.sum", "", "| n | kplay sum | torch.sum | ratio |", "|---|---|---|---|"]
    for n in (10**7, 10**8):
        r = playground.run("sum", sizes={"n": n}, device="cpu", budget_s=2.0)
        v = r.variants[0]
        assert v.check.ok, v.check
        lines.append(f"| {n:.0e} | {v.gbps:.1f} GB/s | {r.baseline_gbps:.1f} GB/s | {v.gbps / r.baseline_gbps:.2f}× |")


def cold_compiles(lines: list[str], default: bool) -> None:
    """Each build in a fresh process with an empty cache, as an attendee's first run."""
    from playground import registry

    build = ("import sys, time; sys.path.insert(0, {root!r}); from playground import registry; "
             "from playground.build import build; f = registry.find({fam!r}); v = f.variants[{var!r}]; "
             "t = time.perf_counter(); build(f, v, {{p.name: p.default for p in f.params.values()}}); "
             "print(time.perf_counter() - t)")
    lines += ["", "## Cold compile (empty cache, fresh process)", "", "| snippet | seconds |", "|---|---|"]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "KPLAY_CACHE": cache}
        for fam in registry.families().values():
            for v in fam.variants_for("cpu"):
                if v.sources:
                    code = build.format(root=str(ROOT), fam=fam.name, var=v.name)
                    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True, check=True)
                    lines.append(f"| {fam.name}/{v.name} | {float(done.stdout.split()[-1]):.2f} |")
        if default:
            code = ("import time; from torch.utils.cpp_extension import load_inline; t = time.perf_counter(); "
                    "load_inline('bench_default', 'torch::Tensor twice(torch::Tensor x) { return x * 2; }', "
                    f"functions=['twice'], build_directory={cache!r}, extra_cflags=['-O3']); print(time.perf_counter() - t)")
            done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True, check=True)
            lines.append(f"| load_inline default (torch/extension.h + pybind), a one-line op | {float(done.stdout.split()[-1]):.2f} |")


def warm_run(lines: list[str]) -> None:
    def timed(cmd: list[str]) -> float:
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            runs.append(time.perf_counter() - t)
        return statistics.median(runs)

    kplay = [sys.executable, str(ROOT / "cli.py"), "run", "sum", "--n", "1e7", "--device", "cpu"]
    subprocess.run(kplay, check=True, capture_output=True)  # fill the cache
    run_s, torch_s = timed(kplay), timed([sys.executable, "-c", "import torch"])
    lines += ["", "## Warm `kplay run sum --n 1e7`, end to end (median of 5)", "",
              f"- kplay: {run_s:.2f} s; `python -c 'import torch'`: {torch_s:.2f} s ({run_s / torch_s:.1f}× an import of torch)"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-default-compile", action="store_true", help="skip the 30 s default load_inline build")
    ap.add_argument("--out", type=Path, help="also write the report (markdown) here")
    args = ap.parse_args()
    import torch

    lines = [f"# kplay CPU benchmark, {datetime.date.today()}", "",
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
             f"({torch.get_num_threads()} threads), Python {platform.python_version()}", ""]
    sum_throughput(lines)
    cold_compiles(lines, not args.skip_default_compile)
    warm_run(lines)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
