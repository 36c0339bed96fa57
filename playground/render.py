"""Template rendering: {{name}} in a source becomes the parameter's value."""

from __future__ import annotations

import re

from .errors import UsageError
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
