"""The workshop loop, timed: eject, change one line, rebuild + check; next to plain load_inline.

    python benchmarks/rebuild.py [--device cpu|cuda] [--variant NAME] [--out FILE]

Each row is one fresh `kplay run DIR --no-bench` (a new process, as an attendee types it), so the
time includes starting Python and importing torch. Plain load_inline compiles the same rendered
source in a fresh process with the same flags and no kplay around it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, emit, wall

CLI = [sys.executable, "-W", "ignore", str(ROOT / "cli.py")]


def plain_load_inline(folder: Path, sources: list[str], env: dict, tag: str) -> float:
    """The same sources through load_inline alone, in a fresh process (import torch included)."""
    cpp = [str(folder / s) for s in sources if not s.endswith(".cu")]
    cu = [str(folder / s) for s in sources if s.endswith(".cu")]
    code = (
        "import sys; sys.path.insert(0, %r); from playground.compiler.toolchain import CXX_FLAGS, CUDA_FLAGS, ENGINE_INCLUDE\n"
        "from playground.compiler.toolchain import setup_env, compiler; setup_env()\n"
        "from torch.utils.cpp_extension import load_inline; from pathlib import Path\n"
        "cpp = [Path(p).read_text() for p in %r]; cu = [Path(p).read_text() for p in %r]\n"
        "load_inline(name=%r, cpp_sources=cpp, cuda_sources=cu or None, no_implicit_headers=True, is_python_module=False,\n"
        "  extra_cflags=[*CXX_FLAGS, *compiler()[1], '-DUSE_CUDA', '-DKPLAY_NS=%s'], extra_cuda_cflags=[*CUDA_FLAGS, '-DKPLAY_NS=%s'],\n"
        "  extra_include_paths=[str(ENGINE_INCLUDE), %r], build_directory=tempfile.mkdtemp())\n"  # kplay/stable.h, the family's headers
    ) % (str(ROOT), cpp, cu, tag, tag, tag, str(folder))
    return wall([sys.executable, "-W", "ignore", "-c", "import tempfile\n" + code], env)


def ninja_steps(cache: Path) -> str:
    """What the newest build spent on each target (its .ninja_log): which unit is the critical path."""
    logs = sorted(cache.glob("kplay_*/.ninja_log"), key=lambda f: f.stat().st_mtime)
    if not logs:
        return "no .ninja_log found"
    steps = [ln.split("\t") for ln in logs[-1].read_text().splitlines() if ln and not ln.startswith("#")]
    return ", ".join(f"{target} {int(start) / 1e3:.2f}-{int(end) / 1e3:.2f} s" for start, end, _, target, _ in steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--variant", default=None)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    variant = args.variant or ("cpp" if args.device == "cpu" else "fast")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "KPLAY_CACHE": f"{tmp}/cache"}
        folder = Path(tmp) / "sum"
        subprocess.run([*CLI, "eject", "sum", str(folder), "--device", args.device, "--variant", variant, "--solution"], env=env, check=True, capture_output=True)
        run = [*CLI, "run", str(folder), "--device", args.device, "--variant", variant, "--no-bench", "--n", "1e6"]
        sources = [p.name for p in folder.iterdir() if p.suffix in (".cpp", ".cu")]
        kernel = folder / ("sum.cpp" if args.device == "cpu" else f"sum_{variant.replace('-', '_')}.cu")
        original = kernel.read_text()
        rows = [("first run (cold build + check)", wall(run, env))]
        rows.append(("warm run (cached build + check)", wall(run, env)))
        for k in (1, 2):  # a one-line change, twice, as an attendee iterates
            kernel.write_text(original + f"// edit {k}\n")
            rows.append((f"one-line edit {k}: rebuild + check", wall(run, env)))
        steps = ninja_steps(Path(tmp) / "cache")
        kernel.write_text(original)
        rows.append(("back to the original source (cache hit) + check", wall(run, env)))
        rows.append(("plain load_inline of the same sources (build only)", plain_load_inline(folder, sources, env, "plain_a")))
        kernel.write_text(original + "// edit 3\n")
        rows.append(("plain load_inline after a one-line edit (build only)", plain_load_inline(folder, sources, env, "plain_b")))
        rows.append(("`python -c 'import torch'` (the floor of any fresh run)", wall([sys.executable, "-c", "import torch"], env)))
    import torch

    lines = [f"# Rebuild loop: sum/{variant} on {args.device}, {datetime.date.today()}", "",
             f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
             f"GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}", "",
             "| step | seconds |", "|---|---|"] + [f"| {what} | {s:.2f} |" for what, s in rows] + [
             "", f"The last edit's build, per ninja target (from its start): {steps}"]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
