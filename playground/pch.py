"""The ATen headers precompiled once per machine, so an ATen op's cold build does not parse them every time.

<ATen/core/Tensor.h> and <torch/library.h> are most of such a build: 5.6 of linear cpp's 6.3 s on the
2-core box. GCC reads a header from `NAME.gch` beside it when a build says `-include NAME`, and when the
precompiled file does not fit the build's flags it parses the header as usual: slower, never wrong.
Stable-ABI sources (sum, print_array) include neither header and get nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sysconfig

from .toolchain import cache_dir, cache_lock, compiler, cpu_model

HEADER = "#include <ATen/core/Tensor.h>\n#include <torch/library.h>\n"
USES_ATEN = re.compile(r"#include\s*<(?:ATen/|torch/library\.h)")


def include_flags(sources: list[str], cflags: list[str], on_event, variant: str) -> list[str]:
    """['-include', header] when the C++ sources use ATen and GCC compiles them; the header precompiled once."""
    version, _ = compiler()
    if not any(USES_ATEN.search(s) for s in sources) or "clang" in version.lower() or "not found" in version:
        return []
    import torch
    from torch.utils.cpp_extension import include_paths

    flags = ["-DTORCH_API_INCLUDE_EXTENSION_H", *[f"-isystem{p}" for p in include_paths()],
             f"-isystem{sysconfig.get_path('include')}", "-fPIC", "-std=c++20", *cflags]  # as load_inline's
    salt = [version, torch.__version__, cpu_model(), flags, HEADER]  # -march=native means this CPU: a shared cache must not mix
    key = hashlib.sha256(json.dumps(salt).encode()).hexdigest()[:12]
    folder = cache_dir() / "pch" / key
    header, done = folder / "kplay_aten.h", folder / "done"
    if (folder / "failed").exists():  # this compiler refused once: no second 10 s attempt per build
        return []
    if not done.exists():
        with cache_lock(f"pch-{key}"):
            if not done.exists() and not _precompile(header, flags, on_event, variant):
                return []
    return ["-include", str(header)]


def _precompile(header, flags: list[str], on_event, variant: str) -> bool:
    """Write the header and its .gch (about 10 s and 290 MB, once); False if the compiler refuses."""
    from . import events

    on_event(events.BUILD_START, variant=f"{variant} (the ATen headers, once per machine)")
    header.parent.mkdir(parents=True, exist_ok=True)
    header.write_text(HEADER)
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
