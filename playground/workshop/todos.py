"""The exercise marking: a solution's `// kplay:todo` regions become a starter's numbered TODOs and its hints.

A region in a C++ or CUDA source (the file stays the full solution: every marker is a comment):

    // kplay:todo <what to do, one line>      the TODO's text in the starter
    // kplay:why <why, one line>              optional: the hint's second line
    // kplay:code <a line of code>            optional: code the hint gives, which compiles in the TODO's place
    ...the solution's lines...                dropped from the starter
    // kplay:stub                             optional: what the starter keeps instead, written
    // return T(0);                           as comments here, uncommented in the starter
    // kplay:end
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError

MARKER = re.compile(r"//\s*kplay:(\w+)\s?(.*)$")


@dataclass(frozen=True)
class Hint:
    number: int
    file: str
    line: int  # the TODO's line in the starter
    what: str
    why: str = ""
    code: str = ""  # lines of code, in the TODO's place they compile (a test builds each)


def strip(text: str, where: str, first: int = 1, fill: dict[int, str] | None = None) -> tuple[str, list[Hint]]:
    """The starter's text and its hints, numbered from `first`; a broken marking is one UsageError. `fill`: the
    code to put in place of the starter's lines of these TODOs (by number), to build a hint's code."""
    out, hints, region = [], [], None  # region: [indent, starter line, what, why, in_stub, stub, code, its line]
    for k, line in enumerate(text.splitlines(keepends=True), 1):
        m = MARKER.search(line)
        tag, rest = (m.group(1), m.group(2).strip()) if m else (None, "")
        if tag not in (None, "todo", "why", "code", "stub", "end"):
            raise UsageError(f"{where}:{k}: unknown marker // kplay:{tag} (todo, why, code, stub, end)")
        if region is None:
            if tag == "todo":
                if not rest:
                    raise UsageError(f"{where}:{k}: // kplay:todo needs its hint on the same line")
                region = [line[:len(line) - len(line.lstrip())], len(out) + 1, rest, "", False, [], [], k]
                out.append(f"{region[0]}// TODO {first + len(hints)}: {rest}\n")
            elif tag:
                raise UsageError(f"{where}:{k}: // kplay:{tag} outside a // kplay:todo region")
            else:
                out.append(line)
        elif tag == "todo":
            raise UsageError(f"{where}:{k}: // kplay:todo inside the region opened at line {region[7]} (close it with // kplay:end)")
        elif tag == "why":
            region[3] = (region[3] + " " + rest).strip()
        elif tag == "code":
            region[6].append(m.group(2).rstrip())
        elif tag == "stub":
            region[4] = True
        elif tag == "end":
            number, code = first + len(hints), "\n".join(region[6])
            hints.append(Hint(number, Path(where).name, region[1], region[2], region[3], code))
            placed = [f"{region[0]}{c}\n" for c in fill[number].splitlines()] if fill and number in fill else region[5]
            out += placed
            region = None
        elif region[4]:  # a stub line: a comment in the solution, code in the starter
            region[5].append(re.sub(r"^(\s*)// ?", r"\1", line))
    if region is not None:
        raise UsageError(f"{where}:{region[7]}: // kplay:todo without its // kplay:end")
    return "".join(out), hints


def starter_files(files: dict[str, str], folder: Path, fill: dict[int, str] | None = None
                  ) -> tuple[dict[str, str], list[Hint]]:
    """Every file's starter (hints numbered across the files, in order) and all the hints; `fill` as strip's."""
    out, hints = {}, []
    for name, text in files.items():
        if name.endswith((".cpp", ".cu", ".cuh", ".h", ".hpp")):
            text, found = strip(text, str(folder / name), len(hints) + 1, fill)
            hints += found
        out[name] = text
    return out, hints
