"""The headers every build parses, precompiled once per machine: ATen's for ATen ops, the stable ABI's for the rest.

<ATen/core/Tensor.h> and <torch/library.h> are most of an ATen op's cold build: 5.6 of linear cpp's 6.3 s on
the 2-core box; the stable-ABI headers are 3.1 of sum cpp's 4.5 s compile. GCC reads a header from `NAME.gch`
beside it when a build says `-include NAME`, and when the precompiled file does not fit the build's flags it
parses the header as usual: slower, never wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from .toolchain import cache_dir, cache_lock, compiler, cpu_model, shared_folder


@dataclass(frozen=True)
class Headers:
    name: str  # the precompiled header's file: kplay_<name>.h
    text: str
    used: re.Pattern  # a source that includes one of them gets the set
    what: str  # for the build's progress line


ATEN = Headers("aten", "#include <ATen/core/Tensor.h>\n#include <torch/library.h>\n",
               re.compile(r"#include\s*<(?:ATen/|torch/library\.h)"), "the ATen headers")
STABLE = Headers("stable", "".join(f"#include <{h}>\n" for h in (
    "kplay/stable.h", "torch/csrc/inductor/aoti_torch/c/shim.h", "torch/csrc/stable/library.h",
    "torch/csrc/stable/ops.h", "torch/csrc/stable/tensor.h", "torch/headeronly/core/ScalarType.h",
    "torch/headeronly/util/Exception.h")), re.compile(r"#include\s*<torch/csrc/stable/"), "the stable-ABI headers")
DEFINE, INCLUDE = re.compile(r"^\s*#\s*define\b", re.M), re.compile(r"^\s*#\s*include\b", re.M)


def _defines_first(source: str) -> bool:
    """A #define before the first #include (TORCH_TARGET_VERSION, USE_CUDA) may change what the headers say:
    such a source must include them itself, after it."""
    define, include = DEFINE.search(source), INCLUDE.search(source)
    return bool(define) and (include is None or define.start() < include.start())


def _one_level(cflags: list[str]) -> list[str]:
    """The flags with -O1, -O2 and -O3 as one: GCC takes a .gch made at any of them for a build at any other (each
    defines __OPTIMIZE__ and nothing more), so lltm's -O1 build and its CUDA variants' -O3 share ATen's."""
    levels = [f for f in cflags if re.fullmatch(r"-O\w*", f)]
    if levels and levels[-1] in ("-O1", "-O2", "-O3"):
        return [f for f in cflags if f not in levels] + ["-O2"]
    return cflags


def include_flags(sources: list[str], cflags: list[str], engine: Path, on_event, variant: str) -> list[str]:
    """['-include', header] when GCC compiles the C++ sources and they use ATen or the stable ABI; the header set
    precompiled once. `engine` is the folder of kplay's own headers (kplay/stable.h), hashed into the key."""
    version, _ = compiler()
    headers = next((h for h in (ATEN, STABLE) if any(h.used.search(s) for s in sources)), None)
    if (headers is None or "clang" in version.lower() or "not found" in version
            or any(_defines_first(s) for s in sources)):
        return []
    import torch
    from torch.utils.cpp_extension import include_paths

    flags = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-I{engine}", *[f"-isystem{p}" for p in include_paths()],
             f"-isystem{sysconfig.get_path('include')}", "-fPIC", "-std=c++20", *_one_level(cflags)]  # as load_inline's
    own = [p.read_text() for p in sorted(engine.rglob("*.h"))]
    salt = [version, torch.__version__, cpu_model(), flags, headers.text, own]  # -march=native means this CPU
    key = hashlib.sha256(json.dumps(salt).encode()).hexdigest()[:12]
    shared = shared_folder("pch")  # in the sandbox: the shared cache's headers, read-only, where it has them
    if shared and (shared / key / "done").exists():
        return ["-include", str(shared / key / f"kplay_{headers.name}.h")]
    folder = cache_dir() / "pch" / key
    header, done = folder / f"kplay_{headers.name}.h", folder / "done"
    if (folder / "failed").exists():  # this compiler refused once: no second 10 s attempt per build
        return []
    if not done.exists():
        with cache_lock(f"pch-{key}"):
            if not done.exists() and not _precompile(header, headers, flags, on_event, variant):
                return []
    return ["-include", str(header)]


def _precompile(header: Path, headers: Headers, flags: list[str], on_event, variant: str) -> bool:
    """Write the header and its .gch (7-20 s and 100-300 MB, once); False if the compiler refuses."""
    from ..core import events

    on_event(events.BUILD_START, variant=f"{variant} ({headers.what}, once per machine)")
    header.parent.mkdir(parents=True, exist_ok=True)
    header.write_text(headers.text)
    gch = header.with_name(header.name + ".gch")
    partial = gch.with_suffix(".partial")
    done = subprocess.run([os.environ.get("CXX", "c++"), *flags, "-x", "c++-header", str(header), "-o", str(partial)],
                          capture_output=True)
    if done.returncode != 0:
        (header.parent / "failed").write_text(done.stderr.decode(errors="replace")[-2000:])
        return False
    partial.rename(gch)
    (header.parent / "done").write_text("")
    return True
