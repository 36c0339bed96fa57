"""kplay doctor: each part of the tool chain, with OK or a fix."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys


CPU_BUILD = ("no GPU here, so the CPU build would do, at a fraction of the size: in a fresh venv, first pip install "
             "torch --index-url https://download.pytorch.org/whl/cpu, then kplay (pip install .)")


def _version(cmd: list[str]) -> str:
    try:
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return text[-1] if cmd[0].endswith("nvcc") and text else (text[0] if text else "")


def diagnose() -> list[tuple[str, bool, str]]:
    """(what, ok, detail or fix) for each part; a missing GPU or nvcc is fine (CPU variants only)."""
    from ..core.errors import UsageError
    from .build import cache_size
    from .toolchain import cache_dir, cache_shared, compiler, cuda_home, venv_bin

    rows = [("python", sys.version_info >= (3, 10), f"{platform.python_version()} at {sys.executable}")]
    try:
        import torch
    except ImportError:
        return rows + [("torch", False, "not installed: pip install kplay (or pip install torch)")]
    gpu = torch.cuda.is_available()
    rows.append(("torch", True, f"{torch.__version__}, CUDA build: {torch.version.cuda or 'none (CPU only)'}"
                 + (f"; {CPU_BUILD}" if torch.version.cuda and not gpu else "")))
    rows.append(("GPU", True, torch.cuda.get_device_name() if gpu else "none: CPU variants only (--device cpu)"))
    home = cuda_home()
    nvcc = f"{home}/bin/nvcc" if home else None
    if nvcc and shutil.which(nvcc):
        rows.append(("nvcc / CUDA_HOME", True, f"{_version([nvcc, '--version'])}; CUDA_HOME={home}"))
    else:
        rows.append(("nvcc / CUDA_HOME", not gpu, "not found: CUDA variants cannot build; install the CUDA toolkit "
                     "or set CUDA_HOME" if gpu else "not found: fine for CPU variants; CUDA needs the CUDA toolkit"))
    ninja = shutil.which("ninja", path=os.pathsep.join([venv_bin(), os.environ.get("PATH", "")]))
    rows.append(("ninja", bool(ninja), _version([ninja, "--version"]) if ninja else "not found: pip install ninja"))
    version, flags = compiler()
    ok = "not found" not in version
    rows.append(("C++ compiler", ok, f"{version} {' '.join(flags)}" if ok else "not found: install g++ or clang (Xcode command line tools on macOS)"))
    try:
        with cache_shared():  # what every build takes first: it writes the cache's lock file
            rows.append(("build cache", True, f"{cache_dir()} ({cache_size() / 1e6:.1f} MB; kplay clean empties it)"))
    except UsageError as e:
        rows.append(("build cache", False, str(e)))
    return rows
