"""Cold build time of one variant: kplay's build beside plain load_inline of the same rendered sources.

    python benchmarks/cold_build.py lltm cpp [--repeat 3] [--param k=v ...]

Each round is a fresh process (a library loads once per process) that builds twice from nothing:
through playground.compiler.build (a fresh KPLAY_CACHE) and through load_inline alone (a fresh build folder, the
same flags, a namespace of its own), torch already imported, so the figures are the compile and link
alone. Medians are printed with every round's figures, wall clock and the compilers' CPU time (steadier
when other work shares the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.compiler import build as kbuild  # noqa: E402
from playground.family import registry, render  # noqa: E402


def children_cpu() -> float:
    """CPU seconds of this process's finished children (the compilers, through ninja)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(fn) -> tuple[float, float]:
    """(wall, compiler CPU) seconds of fn(): on a shared machine the CPU time is the steadier figure."""
    t, c = time.perf_counter(), children_cpu()
    fn()
    return time.perf_counter() - t, children_cpu() - c


def kplay_build(family, variant, params) -> tuple[float, float]:
    os.environ["KPLAY_CACHE"] = tempfile.mkdtemp(prefix="kplay-cold-")
    return timed(lambda: kbuild.build(family, variant, params))


def plain_load_inline(family, variant, params, tag: str) -> tuple[float, float]:
    """load_inline with the arguments kplay would pass, under a name of its own."""
    from torch.utils.cpp_extension import load_inline

    _, args = kbuild.identity(family, variant, render.sources(family, variant, params))
    for key in ("extra_cflags", "extra_cuda_cflags"):  # a namespace of its own: kplay's build is loaded too
        if args[key]:
            args[key] = [f"-DKPLAY_NS={tag}" if f.startswith("-DKPLAY_NS=") else f for f in args[key]]
    return timed(lambda: load_inline(name=tag, build_directory=tempfile.mkdtemp(prefix="plain-"),
                                     is_python_module=False, no_implicit_headers=True, verbose=False, **args))


def one_round(args) -> None:
    """Both builds, in this process; prints their (wall, CPU) seconds as JSON."""
    kbuild.setup_env()
    family = registry.find(args.family)
    variant, params = family.variants[args.variant], family.parse_params(args.param)
    k = kplay_build(family, variant, params)
    p = plain_load_inline(family, variant, params, f"plain_{os.getpid()}")
    print(json.dumps([k, p]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family")
    ap.add_argument("variant")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--param", action="append", default=[])
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return one_round(args)
    rounds = []
    for i in range(args.repeat):
        cmd = [sys.executable, "-W", "ignore", __file__, args.family, args.variant, "--one",
               *(f"--param={p}" for p in args.param)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(done.stderr)
        rounds.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"round {i + 1}: " + line(rounds[-1]), flush=True)
    med = [[statistics.median(r[j][c] for r in rounds) for c in (0, 1)] for j in (0, 1)]
    print(f"{args.family}/{args.variant} cold build, median of {len(rounds)}: {line(med)}; "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}")


def line(pair) -> str:
    (kw, kc), (pw, pc) = pair
    return f"kplay {kw:.2f} s (compiler CPU {kc:.2f} s), plain load_inline {pw:.2f} s (CPU {pc:.2f} s)"


if __name__ == "__main__":
    main()
