"""Where this machine's tools are: CUDA, NVIDIA libraries, the compiler, ninja, the CPU, the build cache.

Probed without building anything, so `kplay doctor` and the timing code can ask too.
"""

from __future__ import annotations

import fcntl
import functools
import os
import platform
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from ..core.errors import BuildError, UsageError

CACHE_LOCK = ".kplay-cache.lock"  # the cache-wide lock: builds hold it shared, `kplay clean` exclusive; never removed
# The build's own: flags for every build, and where a build keeps what `kplay show` and the report read.
CXX_FLAGS = ["-O3", "-std=c++20"]  # load_inline adds no -O for C++; torch >= 2.14 wants c++20 with own flags
CUDA_FLAGS = ["-O3", "-std=c++20", "--resource-usage"]  # ptxas -v: each kernel's registers, spills, memory
KEEP = "nvcc"  # the build's subfolder where nvcc leaves its PTX and cubin (--keep), for `kplay show`
COMPILER_LOG = "compiler.log"  # what the compilers printed: ptxas's resource lines, the loop remarks
ENGINE_INCLUDE = Path(__file__).resolve().parent.parent / "include"  # kplay/stable.h, on every build's -I path


def cache_dir() -> Path:
    """Where builds live: $KPLAY_CACHE, else $XDG_CACHE_HOME/kplay, else ~/.cache/kplay."""
    if os.environ.get("KPLAY_CACHE"):
        return Path(os.environ["KPLAY_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "kplay"


def take(f, mode: int, on_wait=None) -> None:
    """flock(f, mode), calling on_wait() first if the lock is not free now."""
    try:
        fcntl.flock(f, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        if on_wait:
            on_wait()
        fcntl.flock(f, mode)


@contextmanager
def _flock(path: Path, mode: int, on_wait=None):
    """A lock the OS drops when its holder dies (a killed build never leaves a stale one); on_wait() is called
    once if it must wait. An unwritable cache is one UsageError naming the folder."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a")
    except OSError as e:
        raise UsageError(f"the build cache {cache_dir()} is not writable ({e.strerror or e}): "
                         "set KPLAY_CACHE to a folder you can write") from None
    with f:
        take(f, mode, on_wait)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cache_shared():
    """Held by every build while it writes or loads an entry: `kplay clean` waits for it."""
    return _flock(cache_dir() / CACHE_LOCK, fcntl.LOCK_SH)


def cache_exclusive(on_wait=None):
    """Held by `kplay clean`: no build is in flight while it removes entries."""
    return _flock(cache_dir() / CACHE_LOCK, fcntl.LOCK_EX, on_wait)


def cache_lock(name: str):
    """An exclusive lock on one entry of the cache (taken inside cache_shared)."""
    return _flock(cache_dir() / "locks" / f"{name}.lock", fcntl.LOCK_EX)


def builds_in_flight() -> list[str]:
    """The cache entries a build holds locked now (a probe that takes no lock it finds held), by name."""
    held = []
    for path in sorted((cache_dir() / "locks").glob("*.lock")):
        try:
            with open(path, "a") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # closing the file drops it at once
        except BlockingIOError:
            held.append(path.stem)
        except OSError:  # removed meanwhile, or unreadable: no build to name
            pass
    return held


def cuda_home() -> str | None:
    """The CUDA root: $CUDA_HOME, else the first candidate with the runtime headers.

    torch guesses /usr/local from a /usr/local/bin/nvcc (a link or a wrapper script), where
    cuda_runtime.h is missing; the real root is nvcc's resolved folder or /usr/local/cuda.
    """
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    nvcc = shutil.which("nvcc")
    candidates = [Path(nvcc).resolve().parent.parent] if nvcc else []
    candidates += [Path("/usr/local/cuda"), *sorted(Path("/usr/local").glob("cuda-*"), reverse=True)]
    return next((str(c) for c in candidates if (c / "include" / "cuda_runtime.h").exists()), None)


def nvidia_library(lib: str) -> tuple[str, str]:
    """Header folder and shared object of an NVIDIA library that torch links (cublasLt, cublas, ...).

    The object is the one torch loaded, so the extension shares it rather than loading a second copy (a
    torch without CUDA loads none: then CUDA_HOME's); the headers come from the same install (pip's nvidia
    wheels carry both; a CUDA toolkit installed as its nvcc package alone has neither), else from CUDA_HOME.
    """
    import torch  # noqa: F401  (loads torch's CUDA libraries, where torch has CUDA)

    paths = set()
    try:
        with open("/proc/self/maps") as maps:  # address perms offset dev inode [path]
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6:
                    paths.add(fields[5].strip().removesuffix(" (deleted)"))
    except OSError:  # not Linux
        pass
    home = Path(cuda_home() or "/usr/local/cuda")
    loaded = sorted(p for p in paths if f"/lib{lib}.so" in p)
    so = next(iter(loaded), None) or next(iter(sorted(map(str, home.glob(f"lib*/lib{lib}.so*")))), None)
    if so is None:
        raise BuildError(f"CUDA library {lib}: torch has not loaded lib{lib}.so and {home} has none")
    roots = [Path(so).parent.parent, home, *sorted(home.glob("targets/*"))]
    inc = next((r / "include" for r in roots if (r / "include" / f"{lib}.h").exists()), None)
    if inc is None:
        raise BuildError(f"CUDA library {lib}: no {lib}.h next to {so} or in {home}")
    return str(inc), so


def venv_bin() -> str:
    """The folder of this interpreter's scripts (where pip puts ninja), on PATH or not."""
    return os.path.dirname(sys.executable)


def setup_env() -> None:
    """Environment torch's extension builder reads: ninja on PATH, CUDA_HOME, a GPU arch when there is no GPU."""
    if not os.environ.get("PATH", "").startswith(venv_bin()):  # pip's ninja, when the venv is not activated
        os.environ["PATH"] = os.pathsep.join([venv_bin(), os.environ.get("PATH", "")])
    home = cuda_home()
    if home:
        os.environ["CUDA_HOME"] = home
        ext = sys.modules.get("torch.utils.cpp_extension")  # imported before: it froze its own guess (a notebook's
        if ext is not None and ext.CUDA_HOME != home:      # /usr/local, from nvcc's symlink), which links no cudart
            ext.CUDA_HOME = home
    if "TORCH_CUDA_ARCH_LIST" not in os.environ:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
        else:  # compile-only (CI): the workshop GPU, an H200, instead of every arch torch knows
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"


MACHINE_FLAGS = ["-march=native", "-mprefer-vector-width=256"]  # each kept where the compiler accepts it


@functools.cache
def compiler() -> tuple[str, list[str]]:
    """The C++ compiler's identity and the machine flags it accepts."""
    cxx = os.environ.get("CXX", "c++")
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    except OSError:
        return f"{cxx} (not found)", []
    accepts = lambda flag: subprocess.run([cxx, flag, "-x", "c++", "-E", "-o", os.devnull, os.devnull],
                                          capture_output=True).returncode == 0
    # 256-bit vectors where the CPU has 512-bit ones (GCC's own choice on Intel): on Zen 4, a loop of 512-bit
    # loads streams memory slower, and the C++ sum at n = 1e8 went from 0.96x to 1.00x torch.sum.
    return version, [flag for flag in MACHINE_FLAGS if accepts(flag)]


@functools.cache
def linker_flags() -> list[str]:
    """gold, where the toolchain has it: it links a kernel's library against torch's in under half of ld's time
    (0.14 s against 0.33 s on the 2-core box), one wait less in every rebuild. Tried once on an empty library."""
    cxx = os.environ.get("CXX", "c++")
    if not shutil.which("ld.gold"):
        return []
    try:
        tried = subprocess.run([cxx, "-fuse-ld=gold", "-shared", "-x", "c++", "-", "-o", os.devnull], input=b"",
                               capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return ["-fuse-ld=gold"] if tried.returncode == 0 else []


def remark_flags() -> list[str]:
    """The flags that make the C++ compiler say, on stderr, which loops it vectorized and why not the others."""
    version, _ = compiler()
    if "clang" in version.lower():
        return ["-Rpass=loop-vectorize", "-Rpass-missed=loop-vectorize", "-Rpass-analysis=loop-vectorize"]
    return ["-fopt-info-vec-optimized", "-fopt-info-vec-missed"] if "not found" not in version else []


def cpu_model() -> str:
    """The CPU's model name (a cache shared between machines must not mix -march=native builds)."""
    try:
        with open("/proc/cpuinfo") as info:
            return next(ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def cuda_tool(name: str) -> str | None:
    """A CUDA tool (ncu, compute-sanitizer): on PATH, in the CUDA root's bin, else from NVIDIA's pip wheel.

    The wheels (nvidia-cuda-sanitizer-api, ...) put a launcher script in site-packages/nvidia/cu13/bin.
    """
    found = shutil.which(name)
    if found:
        return found
    folders = [Path(cuda_home() or "/usr/local/cuda") / "bin", Path("/usr/local/cuda/bin")]
    folders += [Path(p) / "nvidia" / sub / "bin" for p in sys.path if p for sub in ("cu13", "cu12", "cuda_sanitizer_api")]
    return next((str(f / name) for f in folders if os.access(f / name, os.X_OK)), None)



def shared_folder(name: str) -> Path | None:
    """In the sandbox: a build's folder in the shared cache, read-only ($KPLAY_SHARED_CACHE), else None."""
    shared = os.environ.get("KPLAY_SHARED_CACHE")
    return Path(shared) / name if shared else None


def folder(name: str) -> Path:
    """A build's folder in the cache: its library, its compiler's output, nvcc's kept files."""
    return cache_dir() / name


def engine_headers() -> dict[str, str]:
    """The engine's own headers (kplay/stable.h), by path under ENGINE_INCLUDE, with their text."""
    return {p.relative_to(ENGINE_INCLUDE).as_posix(): p.read_text() for p in sorted(ENGINE_INCLUDE.rglob("*.h"))}
