"""The CPU speed targets on this machine, each measured side by side with its reference in one run.

    python benchmarks/cpu.py [--parts sum,builds,warm] [--builds 3] [--out FILE]

sum     sum cpp against torch.sum at n = 1e5 ... 1e8 (through playground.run: the kernel and torch.sum take
        turns); at n = 1e3 and 1e4, where the dispatcher's cost is most of the time, kplay's op and
        torch.ops.aten.sum.default called the same way (both op overloads), and torch.sum.
        FASTER/SLOWER where the interquartile ranges are apart, TIE where they overlap.
builds  every CPU-buildable variant in the registry, cold: kplay's build (fresh process, empty KPLAY_CACHE)
        beside plain load_inline of the same rendered sources with load_inline's defaults (fresh
        TORCH_EXTENSIONS_DIR), and `python -c "import torch"` as the floor; median of --builds each,
        taking turns; target: kplay's build <= 6 s.
warm    a warm `kplay run sum --n 1e7` end to end, beside `python -c "import torch"` (median of 5).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

from common import ROOT, load_line, median_of, spec, verdict

BUILD_TARGET_S = 6.0
PYTHON = [sys.executable, "-W", "ignore", "-c"]
# Each child imports torch before its timer starts: the printed number is the build alone.
PRELUDE = "import os, sys, time, torch; sys.path.insert(0, {root!r}); import playground; "
LOAD = "t = time.perf_counter(); playground.load({fam!r}, {var!r}, device='cpu'); print(time.perf_counter() - t)"
# A fresh build cache holding the machine's precompiled ATen header (made once per machine, by the first ATen
# build): the cold build of a new source version, which is what an edit costs.
SHARE_PCH = "os.makedirs(os.environ['KPLAY_CACHE']); os.symlink({pch!r}, os.path.join(os.environ['KPLAY_CACHE'], 'pch')); "
KPLAY_BUILD, FIRST_BUILD = PRELUDE + SHARE_PCH + LOAD, PRELUDE + LOAD
PLAIN_BUILD = ("import json, sys, time, torch; from torch.utils.cpp_extension import load_inline; "
               "kw = json.load(open({args!r})); t = time.perf_counter(); load_inline(**kw); print(time.perf_counter() - t)")


def _row(label: str, a, b) -> str:
    us = lambda s: f"{s.median_s * 1e6:,.1f} ({s.q1_s * 1e6:,.1f}–{s.q3_s * 1e6:,.1f})"
    return f"| {label} | {us(a)} | {us(b)} | {b.median_s / a.median_s:.2f}× | {verdict(a, b)} |"


def sum_large(lines: list[str], budget_s: float) -> None:
    """sum cpp against torch.sum, as `kplay run sum` times them (a check first, then turns)."""
    import playground

    lines += ["## CPU sum vs torch.sum (the target: ≥ torch.sum at 1e5 … 1e8; overlapping IQRs are a tie)", "",
              "| n | kplay sum µs, median (IQR) | torch.sum µs, median (IQR) | kplay speedup | verdict |",
              "|---|---|---|---|---|"]
    for n in (10**5, 10**6, 10**7, 10**8):
        r = playground.run("sum", sizes={"n": n}, device="cpu", variant="cpp", budget_s=budget_s)
        v = r.variants[0]
        if not v.check.ok:
            sys.exit(f"sum cpp fails its check at n={n}: {v.check}")
        lines.append(_row(f"1e{len(str(n)) - 1}", v.time, r.baselines["torch.sum"].time))
    lines += ["", f"Timing: {v.time.method}, at least 30 samples each, the two taking turns (`kplay run`'s own loop); "
              f"{load_line()} after.", ""]


def sum_small(lines: list[str], budget_s: float) -> None:
    """At 1e3 and 1e4: kplay's op and aten's, both called as op overloads, and torch.sum."""
    import torch

    import playground
    from playground.run.timing import bench

    mine = playground.load("sum", "cpp", device="cpu").sum.default
    tolerance = spec("sum").tolerance
    lines += ["## Small n: kplay's op vs torch.ops.aten.sum.default, called the same way (the target: ≥ 1.0×)", "",
              "| n | contender | µs, median (IQR) | kplay speedup over it | verdict |", "|---|---|---|---|---|"]
    for n in (10**3, 10**4):
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        if abs(mine(x).item() - x.double().sum().item()) > tolerance(x, x.dtype)[0]:
            sys.exit(f"sum cpp gives a wrong answer at n={n}")
        fns = {"kplay op (ops.sum.default)": lambda: mine(x), "torch.ops.aten.sum.default": lambda: torch.ops.aten.sum.default(x),
               "torch.sum": lambda: torch.sum(x)}
        stats = bench(fns, "cpu", budget_s=budget_s, warm=True)
        ours = stats["kplay op (ops.sum.default)"]
        for name, s in stats.items():
            versus = "— | —" if s is ours else f"{s.median_s / ours.median_s:.2f}× | {verdict(ours, s)}"
            lines.append(f"| 1e{len(str(n)) - 1} | {name} | {s.median_s * 1e6:.2f} ({s.q1_s * 1e6:.2f}–{s.q3_s * 1e6:.2f}) | {versus} |")
    lines += ["", f"Timing: {ours.method}; {ours.samples} samples each, the three taking turns; {load_line()} after.", ""]


def buildable(only: str = "") -> list:
    """(family, variant) for every variant that builds for the CPU (device cpu or any, with sources), or those named."""
    from playground.family import registry

    found = [(f, v) for f in registry.families().values() for v in f.variants_for("cpu") if v.sources]
    wanted = set(only.split(",")) - {""}
    if unknown := wanted - {f"{f.name}/{v.name}" for f, v in found}:
        sys.exit(f"--variants: no CPU-buildable {', '.join(sorted(unknown))}; valid: {', '.join(f'{f.name}/{v.name}' for f, v in found)}")
    return [(f, v) for f, v in found if not wanted or f"{f.name}/{v.name}" in wanted]


def plain_args(fam, v, folder: Path) -> Path:
    """load_inline's arguments for the variant's rendered sources, defaults otherwise, saved as JSON.

    Only what the sources cannot build without: the library name they register (KPLAY_NS), the
    family's folder for the headers they include, and is_python_module=False (they register ops,
    not a Python module). load_inline itself adds <torch/extension.h> and no -O flag.
    """
    import json

    from playground.family import render
    from playground.compiler.toolchain import ENGINE_INCLUDE
    name = f"plain_{fam.name}_{v.name}".replace("-", "_")
    srcs = render.sources(fam, v, fam.parse_params([]))
    kw = {"name": name, "cpp_sources": list(srcs.values()), "is_python_module": False, "extra_cflags": [f"-DKPLAY_NS={name}"]}
    kw["extra_include_paths"] = [str(ENGINE_INCLUDE), *([str(fam.path)] if v.includes else [])]  # kplay/stable.h
    path = folder / f"{name}.json"
    path.write_text(json.dumps(kw))
    return path


def cold_builds(lines: list[str], k: int, folder: Path, only: str = "") -> bool:
    """Each build in a fresh process with an empty cache, kplay and plain load_inline taking turns."""
    from playground.compiler.toolchain import setup_env
    setup_env()  # the children inherit ninja on PATH and CUDA_HOME, as kplay's own build sets them
    lines += [f"## Cold build of every CPU variant (the target: ≤ {BUILD_TARGET_S:g} s), median of {k}", "",
              f"{load_line()} before.", "",
              "| variant | kplay build s, median (range) | kplay process s | load_inline defaults build s, median (range) "
              "| load_inline process s | kplay ÷ load_inline | target |", "|---|---|---|---|---|---|---|"]
    floor = median_of(k, {"torch": [*PYTHON, "import torch"]})["torch"].wall
    ok, pch = True, folder / "first" / "pch"
    first = median_of(1, {"first": [*PYTHON, FIRST_BUILD.format(root=str(ROOT), fam="lltm", var="cpp")]},
                      env={**os.environ, "KPLAY_CACHE": str(folder / "first")})["first"].inner
    for fam, v in buildable(only):
        args = plain_args(fam, v, folder)
        runs = median_of(k, {"kplay": [*PYTHON, KPLAY_BUILD.format(root=str(ROOT), pch=str(pch), fam=fam.name, var=v.name)],
                             "plain": [*PYTHON, PLAIN_BUILD.format(args=str(args))]},
                         fresh=("KPLAY_CACHE", "TORCH_EXTENSIONS_DIR"))
        mine, plain = runs["kplay"], runs["plain"]
        passed = mine.inner <= BUILD_TARGET_S
        ok &= passed
        span = lambda r: f"{r.inner:.2f} ({r.inner_range[0]:.2f}–{r.inner_range[1]:.2f})"
        lines.append(f"| {fam.name}/{v.name} | {span(mine)} | {mine.wall:.2f} | {span(plain)} | {plain.wall:.2f} | "
                     f"{mine.inner / plain.inner:.2f}× | {'PASS' if passed else 'FAIL'} |")
    lines += [f"| `python -c \"import torch\"` (the floor of any fresh process) | | {floor:.2f} | | | | |",
              f"| the first ATen build on a machine (lltm/cpp, the ATen headers precompiled on the way) | {first:.2f} | | | | | |", "",
              f"{'PASS' if ok else 'FAIL'}: every CPU variant's cold build ≤ {BUILD_TARGET_S:g} s. {load_line()} after.",
              "Build s: the build alone, timed in the child after `import torch`; process s: the child's whole wall clock.",
              "load_inline defaults: its own <torch/extension.h> prepended, no -O flag; kplay: no implicit headers, "
              "-O3 (-march=native where accepted).", ""]
    return ok


def warm_run(lines: list[str]) -> None:
    kplay = [sys.executable, str(ROOT / "cli.py"), "run", "sum", "--n", "1e7", "--device", "cpu"]
    median_of(1, {"fill the cache": kplay})
    runs = median_of(5, {"kplay": kplay, "torch": [sys.executable, "-c", "import torch"]})
    run_s, torch_s = runs["kplay"].wall, runs["torch"].wall
    lines += ["## Warm `kplay run sum --n 1e7`, end to end (median of 5)", "",
              f"- kplay: {run_s:.2f} s; `python -c 'import torch'`: {torch_s:.2f} s ({run_s / torch_s:.1f}× an import of torch)", ""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="sum,builds,warm", help="comma-separated: sum, builds, warm")
    ap.add_argument("--builds", type=int, default=3, help="cold builds per variant (the median is reported)")
    ap.add_argument("--variants", default="", help="builds: only these, e.g. sum/cpp,lltm/cpp (default: every one)")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per sum size (at least 30 samples)")
    ap.add_argument("--threads", type=int, help="sum: torch's threads (default: torch's own choice), e.g. 1 on a busy box")
    ap.add_argument("--out", type=Path, help="also write the report (markdown) here")
    args = ap.parse_args()
    parts = args.parts.split(",")
    buildable(args.variants)  # a wrong name fails now, not after the sum part
    if unknown := set(parts) - {"sum", "builds", "warm"}:
        sys.exit(f"--parts: unknown {', '.join(sorted(unknown))}; valid: sum, builds, warm")
    import tempfile

    import torch

    from playground.compiler.toolchain import cpu_model
    if args.threads:
        torch.set_num_threads(args.threads)
    lines = [f"# kplay CPU benchmark, {datetime.date.today()}", "",
             f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
             f"Python {platform.python_version()}; {load_line()} at the start", ""]
    ok = True
    if "sum" in parts:
        sum_large(lines, args.budget)
        sum_small(lines, args.budget)
    if "builds" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            ok = cold_builds(lines, args.builds, Path(tmp), args.variants)
    if "warm" in parts:
        warm_run(lines)
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
