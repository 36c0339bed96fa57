"""Compile a variant with load_inline behind a content-keyed cache, and map compiler errors back."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import time
from contextlib import redirect_stdout
from pathlib import Path

from ..core import events
from ..core.capture import stdout_fd
from ..core.errors import BuildError, UsageError
from ..core.record import BuildInfo
from ..family import render
from ..family.registry import Family, Variant
from . import pch
from .toolchain import (
    CACHE_LOCK,
    COMPILER_LOG,
    CUDA_FLAGS,
    CXX_FLAGS,
    ENGINE_INCLUDE,
    KEEP,
    cache_dir,
    cache_exclusive,
    cache_lock,
    cache_shared,
    compiler,
    cpu_model,
    engine_headers,
    folder,
    linker_flags,
    nvidia_library,
    remark_flags,
    shared_folder,
    setup_env,
)

# What `kplay show --asm/--ptx/--sass` and the run report read from a build, none of which changes the code
# generated: C++ line tables (-g1), CUDA line info (-lineinfo, also what a sanitizer's findings need).
CXX_LINES = ["-g1"]
CUDA_LINES = ["-lineinfo"]
MAX_ERRORS = 3
LAYOUT = 2  # of a build's folder: a change gives every build a new name (2: the compiler's log, not its parts)
_loaded: set[str] = set()  # builds whose library this process has loaded


def _headers(family: Family, variant: Variant) -> tuple[list[str], dict[str, str]]:
    """The include folders (the engine's; the family's when it lists includes) and the headers' text.

    The text is part of the build's identity: editing a header rebuilds, going back hits the cache.
    """
    texts = {f"<{name}>": text for name, text in engine_headers().items()}
    texts.update({name: render.header(family, variant, name) for name in variant.includes})
    return [str(ENGINE_INCLUDE), *([str(family.path)] if variant.includes else [])], texts


def identity(family: Family, variant: Variant, srcs: dict[str, str]) -> tuple[str, dict]:
    """The build's name (family, variant, content hash) and its load_inline arguments."""
    import torch

    version, machine_flags = compiler()
    has_cuda = any(n.endswith(".cu") for n in srcs)
    args = dict(
        cpp_sources=[t for n, t in srcs.items() if not n.endswith(".cu")],
        cuda_sources=[t for n, t in srcs.items() if n.endswith(".cu")] or None,
        extra_cflags=[*CXX_FLAGS, *machine_flags, *CXX_LINES, *remark_flags(), *variant.cflags],
        extra_cuda_cflags=[*CUDA_FLAGS, *CUDA_LINES, *gencode(arch_list(variant)), *variant.cuda_cflags]
        if has_cuda else None,
        extra_ldflags=[*linker_flags(), *variant.ldflags],
    )
    args["extra_include_paths"], headers = _headers(family, variant)
    for lib in variant.libraries:
        inc, so = nvidia_library(lib)
        args["extra_include_paths"].append(inc)
        args["extra_ldflags"].append(so)
    cpu = cpu_model() if machine_flags else ""  # -march=native: a cache shared between machines must not mix CPUs
    salt = [LAYOUT, torch.__version__, torch.version.cuda, version, cpu, arch_list(variant) if has_cuda else "", headers]
    digest = hashlib.sha256(json.dumps([args, salt], sort_keys=True).encode()).hexdigest()[:12]
    name = re.sub(r"\W", "_", f"kplay_{family.name}_{variant.name}_{digest}").lower()
    ns = [f"-DKPLAY_NS={name}"]
    args["extra_cflags"] += ns
    if has_cuda:  # nvcc leaves the PTX and the cubin it made in the build's folder: what --ptx and --sass show
        args["extra_cuda_cflags"] += [*ns, "--keep", f"--keep-dir={folder(name) / KEEP}"]
    return name, args


def _precompiled(args: dict, on_event, variant: Variant) -> list[str]:
    """The flags that include the precompiled headers (made now if this cache has none), for a build's args."""
    own = [f for f in args["extra_cflags"] if not f.startswith("-DKPLAY_NS=")]  # the build's flags, less its name
    return pch.include_flags(args["cpp_sources"], own, ENGINE_INCLUDE, on_event, variant.name)


def precompile(family: Family, variant: Variant) -> bool:
    """Make the precompiled headers a variant's build would use, without building it (a test session does this
    first, in the background); False when its sources use none."""
    setup_env()
    _, args = identity(family, variant, render.sources(family, variant, {}))
    with cache_shared():
        return bool(_precompiled(args, events.ignore, variant))


def build(family: Family, variant: Variant, params: dict, on_event=events.ignore):
    """Compile (or reuse) a variant; returns (torch.ops namespace or None, BuildInfo)."""
    if not variant.sources:
        return None, BuildInfo(name="", seconds=0.0, cached=True)
    setup_env()
    runs_here(family, variant)
    import torch

    srcs = render.sources(family, variant, params)
    if sum(n.endswith(".cu") for n in srcs) > 1 or sum(not n.endswith(".cu") for n in srcs) > 1:
        raise BuildError(f"{family.name}/{variant.name}: at most one C++ and one CUDA source per variant")
    for file in (f for f, text in srcs.items() if not text.strip()):
        raise UsageError(f"{family.path / file} is empty: nothing to build (kplay eject writes the family's sources)")
    name, args = identity(family, variant, srcs)
    where = folder(name)
    so = where / f"{name}.so"
    marker = where / "kplay.json"
    # The same content is already in this process (a library loads only once). Its folder must still be
    # there for `kplay show`; after a `kplay clean` it is built again (dlopen of the same path is a no-op).
    if name in _loaded and _valid(marker, so):
        return getattr(torch.ops, name), BuildInfo(name, 0.0, True)
    start = time.perf_counter()
    with cache_shared(), cache_lock(name):
        cached = _valid(marker, so)
        if cached:
            torch.ops.load_library(str(so))
        elif not (cached := _from_shared(name)):
            on_event(events.BUILD_START, variant=variant.name)
            shutil.rmtree(where, ignore_errors=True)  # a partial or corrupt entry: start clean
            (where / KEEP).mkdir(parents=True)  # nvcc's --keep-dir
            args["extra_cflags"] += _precompiled(args, on_event, variant)
            (where / COMPILER_LOG).write_text(_compile(name, where, args, family, variant))
            for f in (where / KEEP).glob("*"):  # of nvcc's intermediate files, only what `kplay show` reads
                if f.suffix not in (".ptx", ".cubin"):
                    f.unlink()
            marker.write_text(json.dumps({"so": so.name, "size": so.stat().st_size}))
    _loaded.add(name)
    info = BuildInfo(name, round(time.perf_counter() - start, 3), cached)
    on_event(events.BUILD_DONE, variant=variant.name, seconds=info.seconds, cached=cached)
    return getattr(torch.ops, name), info


def _from_shared(name: str) -> bool:
    """In the sandbox: the build loaded from the shared cache, read-only, where it has it; else False."""
    import torch

    shared = shared_folder(name)
    if not shared or not _valid(shared / "kplay.json", shared / f"{name}.so"):
        return False
    torch.ops.load_library(str(shared / f"{name}.so"))
    return True


def arch_list(variant: Variant) -> str:
    """The GPU archs a variant's CUDA is built for: its own (`arch`, e.g. 9.0a for Hopper's wgmma), else the
    process's (TORCH_CUDA_ARCH_LIST: this machine's GPU, or 9.0 where there is none)."""
    return variant.arch or os.environ.get("TORCH_CUDA_ARCH_LIST", "")


def other_arch(variant: Variant) -> str | None:
    """This GPU, as sm_XY, where the variant is built for another one's arch alone; else None."""
    import torch

    if variant.arch and variant.device == "cuda" and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        if f"{major}.{minor}" != variant.arch.rstrip("a"):
            return f"sm_{major}{minor}"
    return None


def runs_here(family: Family, variant: Variant) -> None:
    """A variant built for one arch runs only on a GPU of that compute capability: else one line, before a build."""
    import torch

    if here := other_arch(variant):
        raise UsageError(f"{family.name}/{variant.name} is built for sm_{variant.arch.replace('.', '')} only; "
                         f"this GPU ({torch.cuda.get_device_name()}) is {here}")


def gencode(archs: str) -> list[str]:
    """nvcc's flags for an arch list as TORCH_CUDA_ARCH_LIST spells it ("9.0", "9.0a", "8.0;8.6+PTX"). Given
    explicitly: torch drops its own whenever any CUDA flag holds "arch", a folder's name among them."""
    flags = []
    for arch in archs.replace(" ", ";").split(";"):
        if arch := arch.strip():
            sm = arch.removesuffix("+PTX").replace(".", "")
            flags.append(f"-gencode=arch=compute_{sm},code=sm_{sm}")
            if arch.endswith("+PTX"):
                flags.append(f"-gencode=arch=compute_{sm},code=compute_{sm}")
    return flags


def _compile(name: str, where: Path, args: dict, family: Family, variant: Variant) -> str:
    """load_inline; returns what the compilers printed (ptxas's resource lines, the loop remarks among it).

    ninja prints the commands' output only when verbose, to fd 1: it is captured there, and torch's own
    verbose chatter on sys.stdout is dropped. A failed build's output is the compiler's errors.
    """
    from torch.utils import cpp_extension
    from torch.utils.cpp_extension import load_inline

    # torch skips a name it compiled before in this process; the folder may be gone since (kplay clean).
    getattr(cpp_extension.JIT_EXTENSION_VERSIONER, "entries", {}).pop(name, None)
    failure = None
    with stdout_fd() as printed, redirect_stdout(io.StringIO()):
        try:
            load_inline(name=name, build_directory=str(where), is_python_module=False, no_implicit_headers=True,
                        verbose=True, **args)
        except (RuntimeError, OSError) as e:
            failure = e
    if isinstance(failure, OSError):
        raise BuildError(f"{family.name}/{variant.name}: the built library does not load: {failure}") from None
    if failure is not None:
        raise compile_error(f"{printed.text}\n{failure}", family, variant) from None
    return printed.text


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
            found.append((*key, m.groupdict().get("col")))  # nvcc gives no column
    if not found:
        commands = ("[", "FAILED", "ninja", "Error building extension")
        said = re.compile(r"\berror\b|\bld:|undefined reference", re.IGNORECASE)  # the linker's lines name no error
        tail = [ln for ln in output.splitlines() if said.search(ln) and not ln.lstrip().startswith(commands)
                and ": missed: " not in ln]  # a loop remark's std::runtime_error is no error (ptxas's would hide)
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
    total = 0
    for f in root.rglob("*") if root.exists() else ():
        with contextlib.suppress(OSError):  # removed meanwhile (a build of its own, kplay clean)
            total += f.stat().st_size if f.is_file() else 0
    return total


def clear_cache(on_wait=None) -> tuple[int, list[str]]:
    """Remove every build (and the measured bandwidths) once no build is in flight (on_wait() is called if
    one is); returns the bytes freed and what could not be removed."""
    root = cache_dir()
    if not root.is_dir():
        return 0, []
    before, kept = cache_size(), []
    with cache_exclusive(on_wait):
        for entry in sorted(root.iterdir()):
            if entry.name == CACHE_LOCK:
                continue
            try:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            except OSError as e:
                kept.append(f"{entry}: {e.strerror or e}")
    return before - cache_size(), kept
