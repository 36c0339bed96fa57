"""Template rendering: {{name}} in a source becomes the parameter's value."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..core.errors import UsageError

if TYPE_CHECKING:  # a type, not an arrow: render is given a family, it never finds one
    from .registry import Family, Variant

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}")


def render(text: str, params: dict, where: str = "source") -> str:
    """Substitute every {{name}}; an unknown name is an error that lists the known ones."""

    def sub(m: re.Match) -> str:
        if m.group(1) not in params:
            valid = ", ".join(params) or "none"
            raise UsageError(f"{where}: unknown template parameter '{{{{{m.group(1)}}}}}'; valid: {valid}")
        return str(params[m.group(1)])

    return PLACEHOLDER.sub(sub, text)


def sources(family: Family, variant: Variant, params: dict) -> dict[str, str]:
    """The variant's rendered sources, by file name: its own parameters' defaults filled in, a combination its
    constraints refuse refused (Family.params_for)."""
    params = family.params_for(variant, params)
    out = {}
    for name in variant.sources:
        path = family.path / name
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise UsageError(f"{family.name}/{variant.name}: source {path} does not exist") from None
        out[name] = render(text, params, where=str(path))
    return out


def uses(family: Family, variant: Variant, param: str) -> bool:
    """Whether a variant's sources mention {{param}} (the report shows only the parameters in play)."""
    return any(param in PLACEHOLDER.findall((family.path / n).read_text()) for n in variant.sources)


def header(family: Family, variant: Variant, name: str) -> str:
    """The text of a header the variant's sources include (not templated: it is compiled as it stands)."""
    try:
        return (family.path / name).read_text()
    except FileNotFoundError:
        raise UsageError(f"{family.name}/{variant.name}: header {family.path / name} (task.toml includes) does not exist") from None


# a build's copy of a source, as a message names it; a STD_TORCH_CHECK message: "fn, file:line, msg"
CACHED = re.compile(r"\S*?(main\.cpp|cuda\.cu):(\d+)")
STD_CHECK = re.compile(r"^(?P<head>.*?: )\w+, (?P<where>\S+:\d+), (?P<msg>.*)$")


def in_sources(message: str, fam, variant) -> str:
    """'... /cache/kplay_sum_cpp_1a2b/main.cpp:54 ...' -> '... snippets/sum/sum.cpp:54 ...'."""

    def source(m: re.Match) -> str:
        ours = [s for s in variant.sources if s.endswith(".cu") == (m[1] == "cuda.cu")]
        return f"{fam.path / ours[0]}:{m[2]}" if ours else m[0]

    mapped = CACHED.sub(source, message)
    std = STD_CHECK.match(mapped)
    return f"{std['head']}{std['msg']} ({std['where']})" if std else mapped
