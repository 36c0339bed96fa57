"""The precompiled headers: ATen's for ATen sources, the stable ABI's for the rest, each made once per machine."""

from pathlib import Path

import pytest

from playground.core import events

from playground.compiler import pch
from playground.compiler.toolchain import ENGINE_INCLUDE
from playground.compiler.toolchain import compiler

ATEN = "#include <ATen/core/Tensor.h>\n#include <torch/library.h>\nint f();\n"
STABLE = "#include <kplay/stable.h>\n#include <torch/csrc/stable/library.h>\nint f();\n"
OWN_TARGET = "#define TORCH_TARGET_VERSION 0\n" + STABLE
gcc = pytest.mark.skipif("clang" in compiler()[0].lower(), reason="GCC only (clang parses the header each time)")


@gcc
@pytest.mark.slow
def test_each_header_set_is_precompiled_once_for_the_sources_that_use_it(tmp_path, monkeypatch):
    """The stable ABI's for real (7-10 s); ATen's (17-24 s) is the test session's own set-up (conftest)."""
    monkeypatch.setenv("KPLAY_CACHE", str(tmp_path))
    seen = []
    on_event = lambda event, **data: seen.append((event, data["variant"]))  # noqa: E731
    flags = pch.include_flags([STABLE], ["-O1"], ENGINE_INCLUDE, on_event, "cpp")
    assert flags[0] == "-include" and flags[1].endswith("kplay_stable.h") and Path(flags[1] + ".gch").stat().st_size > 1e7
    assert seen == [(events.BUILD_START, "cpp (the stable-ABI headers, once per machine)")]
    assert pch.include_flags([STABLE], ["-O1"], ENGINE_INCLUDE, on_event, "cuda") == flags and len(seen) == 1  # reused
    made = []
    monkeypatch.setattr(pch, "_precompile", lambda header, headers, *_: made.append(headers) or True)
    aten = pch.include_flags([ATEN], ["-O1"], ENGINE_INCLUDE, on_event, "cpp")
    assert aten[1].endswith("kplay_aten.h") and made == [pch.ATEN]
    # a source that defines a macro before its includes (its own torch target, say) gets none: it may change them
    assert pch.include_flags([OWN_TARGET], ["-O1"], ENGINE_INCLUDE, on_event, "cpp") == []
    assert pch.include_flags(["// #define X 1\n" + STABLE + "#define Y 2\n"], ["-O1"], ENGINE_INCLUDE, on_event, "cpp") == flags


def test_clang_gets_no_precompiled_header(monkeypatch):
    monkeypatch.setattr(pch, "compiler", lambda: ("Apple clang version 15.0.0", []))
    assert pch.include_flags([ATEN], ["-O1"], ENGINE_INCLUDE, events.ignore, "cpp") == []
