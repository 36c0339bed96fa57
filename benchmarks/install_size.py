"""How big set-up command 1 makes the venv, and how big a laptop's venv is with the CPU build of torch.

Two fresh venvs from a clone of HEAD: `pip install .` as the README's command 1 runs it (pip's default torch,
a CUDA build on Linux), and the CPU build first (`--cpu-torch`, by default PyTorch's CPU wheel index), then
`pip install .`. Each venv's size on disk and the torch it holds.

    python3 benchmarks/install_size.py [--cpu-torch "torch --index-url https://download.pytorch.org/whl/cpu"]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, results_name  # noqa: E402

CPU_TORCH = "torch --index-url https://download.pytorch.org/whl/cpu"


def venv(folder: Path, first: str | None) -> tuple[str, float, float]:
    """A venv with kplay installed (after `first`, if given): its torch, its size in GB and the install's seconds."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    pip = [str(folder / ".venv/bin/pip"), "install", "-q"]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(folder / ".venv")], check=True)
    if first:
        subprocess.run([*pip, *shlex.split(first)], check=True, env=env)
    subprocess.run([*pip, "."], check=True, cwd=folder, env=env)
    seconds = time.perf_counter() - start
    torch = subprocess.run([str(folder / ".venv/bin/python"), "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    size = int(subprocess.run(["du", "-sb", str(folder / ".venv")], capture_output=True, text=True,
                              check=True).stdout.split()[0])
    return torch, size / 1e9, seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu-torch", default=CPU_TORCH, help="what pip installs first for the CPU build")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = parser.parse_args()
    rows = []
    for what, first in (("command 1: pip install .", None), (f"pip install {a.cpu_torch}, then pip install .", a.cpu_torch)):
        with tempfile.TemporaryDirectory(prefix="kplay-size-") as tmp:
            subprocess.run(["git", "clone", "-q", str(ROOT), tmp], check=True)
            torch, gb, seconds = venv(Path(tmp), first)
        rows.append(f"| {what} | {torch} | {gb:.2f} GB | {seconds:.0f} s |")
        print(rows[-1], flush=True)
    text = "\n".join([f"# The venv's size: command 1, and with the CPU build of torch ({time.strftime('%Y-%m-%d')})", "",
                      "`python3 benchmarks/install_size.py`: a fresh clone and venv each; size on disk (du -sb); the "
                      "install's time with pip's cache warm.", "",
                      "| install | torch | venv | time |", "|---|---|---:|---:|", *rows]) + "\n"
    out = a.out / f"{results_name('install-size', 'cpu')}.md"
    out.write_text(text)
    print(text, f"wrote {out}", sep="\n")


if __name__ == "__main__":
    main()
