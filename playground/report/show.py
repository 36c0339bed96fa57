"""`kplay show`: a family's note, sizes and sources, and what the compiler made of them, as rich renderables."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from rich.console import Group
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from ..family.registry import BUILTIN
from .tables import COLORS, loop_line, loop_verdict, sizes_table

OPCODE = r"^(?:@!?[%\w]+\s+)?[A-Za-z_][\w.]*"  # SASS LDG.E.128, PTX ld.global.v4.f32, x86 vaddps, a predicate first
OPERANDS = [(r"\b(?:U?R\d+|U?P\d+|RZ|PT|SR_\w+)\b|%\w+", "cyan"), (r"\b0x[0-9a-f]+\b|(?<![\w.])-?\d+\b", "magenta"),
            (r"[.$]L\w+|<[^>]+>", "yellow")]


def path_lines(head: str, path: str, width: int) -> str:
    """head + path in lines of at most width, broken only after a '/' (never inside a name)."""
    lines, line = [], head
    for part in re.split(r"(?<=/)", path):
        if line.strip() and len(line) + len(part) > width:
            lines.append(line)
            line = "  "
        line += part
    return "\n".join([*lines, line])


def source(fam, chosen: list[tuple], width: int) -> Group:
    """The note, the sizes and parameters, then each chosen variant's files (chosen: (variant, {file: text},
    whether it is an exercise's starter), a starter said to be one."""
    parts = [Text.from_markup(f"[b]{escape(fam.name)}[/b]: {escape(fam.summary)}"),  # a panel's title would be cut
             Panel(Markdown(fam.note.strip() or fam.summary)), sizes_table(fam, [v for v, _, _ in chosen]),
             Text(path_lines("files in ", str(fam.path), width))]
    for v, files, starter in chosen:
        parts.append(Text.from_markup(f"[b]{escape(v.name)}[/b] ({v.device}): {escape(v.note)}"))
        if starter:
            named = fam.name if fam.path.parent == BUILTIN else shlex.quote(str(fam.path))  # built-in, or a folder
            parts.append(Text(f"the exercise's starter, its TODOs to fill in (kplay start {named}/{v.name} DIR); "
                              "--solution shows the solution", style="yellow"))
        for file, text in files.items():
            syntax = Syntax(text, "cuda" if file.endswith(".cu") else "cpp", line_numbers=True, word_wrap=True)
            parts.append(Panel(syntax, title=escape(file), title_align="left"))  # the file's name, whole
    return Group(*parts)


def code(shown: dict, width: int) -> Group:
    """`show --ptx/--sass/--asm`: each variant's functions, its source lines above their instructions."""
    parts = []
    for r in shown["records"]:
        folder = path_lines("from ", shown["shown_as"], width)
        title = f"[b]{r['family']}/{r['variant']}[/b] · {r['kind']} · {escape(', '.join(r['shown']))}\n{escape(folder)}"
        loops = r["loops"] if r["kind"] == "asm" else []
        for loop in loops:
            title += "\n" + loop_line(loop).markup
        parts.append(code_listing(r["functions"], loops, title, set(r["sources"])))
    return Group(*parts)


def code_listing(functions: list[dict], loops: list[dict], title: str, own: set[str]) -> Group:
    """Compiler Explorer's view: a source line, then its instructions indented beneath it, coloured alike.

    Lines of the student's files (`own`) show as numbers, in colour; inlined header code by file name, grey.
    """
    from rich.syntax import Syntax

    remarks = {(loop["file"], loop["line"]): loop for loop in loops}
    lexer = Syntax("", "cpp")
    parts: list = [Text.from_markup(title)]
    for f in functions:
        parts.append(Text(f"\n{f['name']}", style="bold"))
        for g in f["groups"]:
            color = COLORS[g["line"] % len(COLORS)] if g["line"] and g["file"] in own else "bright_black"
            loop = remarks.pop((g["file"], g["line"]), None)  # said once, where the line first shows
            parts.append(_source_line(g, g["file"] in own, color, lexer, loop))
            parts += [Text("▌", style=color) + Text("       ") + _instruction(code) for code in g["code"]]
    count = len(functions)
    parts.append(Text(f"\n{count} function{'s' if count != 1 else ''}; --kernel NAME shows one", style="dim"))
    return Group(*parts)


def _source_line(g: dict, own: bool, color: str, lexer, loop: dict | None) -> Text:
    """'▌  59 │ for (...)': the line's number in the student's file, else the file's name too."""
    where = "" if not g["line"] else f"{g['line']:>4}" if own else f"{Path(g['file']).name}:{g['line']}"
    line = Text("▌", style=color) + Text(f"{where or '   -'} │ ", style=f"bold {color}")
    if g["source"].strip():
        code = lexer.highlight(g["source"].strip())
        code.rstrip()
        line += code
    return line + (Text("  ◀ ") + loop_verdict(loop) if loop else Text())


def _instruction(code: str) -> Text:
    text = Text(code)
    text.highlight_regex(OPCODE, "bold")
    for pattern, style in OPERANDS:
        text.highlight_regex(pattern, style)
    return text
