"""The precompiled ATen header: made once per machine for ATen sources, reused, never for stable-ABI ones."""

import pytest

from playground import events, pch
from playground.toolchain import compiler

ATEN = "#include <ATen/core/Tensor.h>\n#include <torch/library.h>\nint f();\n"
STABLE = "#include <torch/csrc/stable/library.h>\nint f();\n"
gcc = pytest.mark.skipif("clang" in compiler()[0].lower(), reason="GCC only (clang parses the header each time)")


@gcc
@pytest.mark.slow
def test_an_aten_source_gets_the_header_precompiled_once(tmp_path, monkeypatch):
    monkeypatch.setenv("KPLAY_CACHE", str(tmp_path))
    seen = []
    on_event = lambda event, **data: seen.append((event, data["variant"]))  # noqa: E731
    flags = pch.include_flags([ATEN], ["-O1"], on_event, "cpp")
    assert flags[0] == "-include" and (tmp_path / "pch").is_dir()
    gch = next((tmp_path / "pch").glob("*/kplay_aten.h.gch"))
    assert gch.stat().st_size > 1e7 and seen == [(events.BUILD_START, "cpp (the ATen headers, once per machine)")]
    assert pch.include_flags([ATEN], ["-O1"], on_event, "cuda") == flags and len(seen) == 1  # reused, not rebuilt
    assert pch.include_flags([STABLE], ["-O1"], on_event, "cpp") == []


def test_clang_gets_no_precompiled_header(monkeypatch):
    monkeypatch.setattr(pch, "compiler", lambda: ("Apple clang version 15.0.0", []))
    assert pch.include_flags([ATEN], ["-O1"], events.ignore, "cpp") == []
