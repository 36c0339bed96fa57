"""Compile a variant with load_inline behind a content-keyed cache, and map compiler errors back."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import events, render
from .errors import BuildError
from .registry import Family, Variant

CXX_FLAGS = ["-O3", "-std=c++20"]  # load_inline adds no -O for C++; torch >= 2.14 wants c++20 with own flags
CUDA_FLAGS = ["-O3", "-std=c++20"]
MAX_ERRORS = 3
_loaded: set[str] = set()  # builds whose library this process has loaded


def cache_dir() -> Path:
    """Where builds live: $KPLAY_CACHE, else $XDG_CACHE_HOME/kplay, else ~/.cache/kplay."""
    if os.environ.get("KPLAY_CACHE"):
        return Path(os.environ["KPLAY_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "kplay"


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
    import sys

    return os.path.dirname(sys.executable)


def setup_env() -> None:
    """Environment torch's extension builder reads: ninja on PATH, CUDA_HOME, a GPU arch when there is no GPU."""
    if not os.environ.get("PATH", "").startswith(venv_bin()):  # pip's ninja, when the venv is not activated
        os.environ["PATH"] = os.pathsep.join([venv_bin(), os.environ.get("PATH", "")])
    home = cuda_home()
    if home:
        os.environ["CUDA_HOME"] = home
    if "TORCH_CUDA_ARCH_LIST" not in os.environ:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
        else:  # compile-only (CI): the workshop GPU, an H200, instead of every arch torch knows
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"


@functools.cache
def compiler() -> tuple[str, list[str]]:
    """The C++ compiler's identity and the machine flags it accepts."""
    cxx = os.environ.get("CXX", "c++")
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        probe = subprocess.run([cxx, "-march=native", "-x", "c++", "-E", "-o", os.devnull, os.devnull], capture_output=True)
    except OSError:
        return f"{cxx} (not found)", []
    return version, ["-march=native"] if probe.returncode == 0 else []


def cpu_model() -> str:
    import platform

    try:
        return next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


@dataclass(frozen=True)
class BuildInfo:
    name: str
    seconds: float
    cached: bool


@contextmanager
def _locked(path: Path):
    """An exclusive lock the OS drops when its holder dies: a killed build never leaves a stale lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _identity(family: Family, variant: Variant, srcs: dict[str, str]) -> tuple[str, dict]:
    """The build's name (family, variant, content hash) and its load_inline arguments."""
    import torch

    version, machine_flags = compiler()
    has_cuda = any(n.endswith(".cu") for n in srcs)
    args = dict(
        cpp_sources=[t for n, t in srcs.items() if not n.endswith(".cu")],
        cuda_sources=[t for n, t in srcs.items() if n.endswith(".cu")] or None,
        extra_cflags=[*CXX_FLAGS, *machine_flags, *variant.cflags],
        extra_cuda_cflags=[*CUDA_FLAGS, *variant.cuda_cflags] if has_cuda else None,
        extra_ldflags=list(variant.ldflags),
    )
    if variant.includes:  # the headers' text is part of the build's identity: editing one rebuilds
        args["extra_include_paths"] = [str(family.path)]
        salt_headers = {h: render.header(family, variant, h) for h in variant.includes}
    else:
        salt_headers = {}
    for lib in variant.libraries:
        inc, so = nvidia_library(lib)
        args.setdefault("extra_include_paths", []).append(inc)
        args["extra_ldflags"].append(so)
    cpu = cpu_model() if machine_flags else ""  # -march=native: a cache shared between machines must not mix CPUs
    salt = [torch.__version__, torch.version.cuda, version, cpu, os.environ.get("TORCH_CUDA_ARCH_LIST") if has_cuda else "",
            salt_headers]
    digest = hashlib.sha256(json.dumps([args, salt], sort_keys=True).encode()).hexdigest()[:12]
    name = re.sub(r"\W", "_", f"kplay_{family.name}_{variant.name}_{digest}").lower()
    ns = [f"-DKPLAY_NS={name}"]
    args["extra_cflags"] += ns
    if has_cuda:
        args["extra_cuda_cflags"] += ns
    return name, args


def build(family: Family, variant: Variant, params: dict, on_event=events.ignore):
    """Compile (or reuse) a variant; returns (torch.ops namespace or None, BuildInfo)."""
    if not variant.sources:
        return None, BuildInfo(name="", seconds=0.0, cached=True)
    setup_env()
    import torch
    from torch.utils.cpp_extension import load_inline

    srcs = render.sources(family, variant, params)
    if sum(n.endswith(".cu") for n in srcs) > 1 or sum(not n.endswith(".cu") for n in srcs) > 1:
        raise BuildError(f"{family.name}/{variant.name}: at most one C++ and one CUDA source per variant")
    name, args = _identity(family, variant, srcs)
    if name in _loaded:  # the same content is already in this process (a library loads only once)
        return getattr(torch.ops, name), BuildInfo(name=name, seconds=0.0, cached=True)
    where = cache_dir() / name
    so = where / f"{name}.so"
    marker = where / "kplay.json"
    start = time.perf_counter()
    with _locked(cache_dir() / "locks" / f"{name}.lock"):
        cached = _valid(marker, so)
        if not cached:
            on_event(events.BUILD_START, variant=variant.name)
            shutil.rmtree(where, ignore_errors=True)  # a partial or corrupt entry: start clean
            where.mkdir(parents=True)
            try:
                load_inline(name=name, build_directory=str(where), is_python_module=False,
                            no_implicit_headers=True, verbose=False, **args)
            except RuntimeError as e:
                raise compile_error(str(e), family, variant) from None
            except OSError as e:
                raise BuildError(f"{family.name}/{variant.name}: the built library does not load: {e}") from None
            marker.write_text(json.dumps({"so": so.name, "size": so.stat().st_size}))
        else:
            torch.ops.load_library(str(so))
    _loaded.add(name)
    info = BuildInfo(name=name, seconds=round(time.perf_counter() - start, 3), cached=cached)
    on_event(events.BUILD_DONE, variant=variant.name, seconds=info.seconds, cached=cached)
    return getattr(torch.ops, name), info


def _valid(marker: Path, so: Path) -> bool:
    """A finished build: its marker names a library that is there, whole."""
    try:
        meta = json.loads(marker.read_text())
        return so.name == meta["so"] and so.stat().st_size == meta["size"]
    except (OSError, ValueError, KeyError):
        return False


OURS = ("main.cpp", "cuda.cu")  # the files load_inline writes: the snippet's own sources
GCC = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?:fatal )?error:?\s*(?P<msg>.*)$")
NVCC = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\):\s*(?:fatal )?error:?\s*(?P<msg>.*)$")


def compile_error(output: str, family: Family, variant: Variant) -> BuildError:
    """The compiler's first errors, with file and line in the snippet's own sources."""
    files = {"main.cpp": next((n for n in variant.sources if not n.endswith(".cu")), "main.cpp"),
             "cuda.cu": next((n for n in variant.sources if n.endswith(".cu")), "cuda.cu")}
    found = []
    for raw in output.splitlines():
        m = GCC.match(raw.strip()) or NVCC.match(raw.strip())
        if not m:
            continue
        base = Path(m["file"]).name
        src = family.path / files[base] if base in OURS else Path(m["file"])  # a header keeps its own path
        key = (str(src), m["line"], m["msg"])
        if key not in [f[:3] for f in found]:
            found.append((*key, m["col"]))
    if not found:
        commands = ("[", "FAILED", "ninja", "Error building extension")
        tail = [ln for ln in output.splitlines() if "error" in ln.lower() and not ln.lstrip().startswith(commands)]
        tail = tail[-8:] or output.splitlines()[-8:]
        return BuildError(f"{family.name}/{variant.name}: build failed", tail)
    details = []
    for src, line, msg, col in found[:MAX_ERRORS]:
        details.append(f"{src}:{line}{':' + col if col else ''}: error: {msg}")
        try:
            text = Path(src).read_text().splitlines()[int(line) - 1]
            details.append(f"  {line:>4} | {text}")
            if col:
                details.append(f"       | {' ' * (int(col) - 1)}^")
        except (OSError, IndexError):
            pass
    more = len(found) - MAX_ERRORS
    if more > 0:
        details.append(f"... and {more} more error{'s' if more > 1 else ''}")
    src, line, msg, _ = found[0]
    return BuildError(f"{family.name}/{variant.name}: compile error in {Path(src).name}:{line}: {msg}", details)


def cache_size() -> int:
    root = cache_dir()
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.exists() else 0


def clear_cache() -> int:
    """Remove every build (and the measured bandwidths); returns the bytes freed."""
    size = cache_size()
    shutil.rmtree(cache_dir(), ignore_errors=True)
    return size
