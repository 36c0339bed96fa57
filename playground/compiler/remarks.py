"""What the C++ compiler said of the student's loops: each one vectorized or not, and why (from the build's log)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from .toolchain import COMPILER_LOG

REMARK = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):\d+: (?:optimized|missed|remark): (?P<msg>.*)$")


def loops(where: Path, family, variant) -> list[dict]:
    """Each loop of the student's files with the compiler's verdict: {file, line, vectorized, copies, how, why_not}.

    None for a CUDA variant: its C++ file is the binding, whose loops are not the lesson.
    """
    if variant.device == "cuda":
        return []
    try:
        text = (where / COMPILER_LOG).read_text()
    except OSError:
        return []
    found = [asdict(loop) | {"file": student_file(loop.file, where, family, variant)} for loop in parse_remarks(text)
             if is_students(loop.file, where, family)]
    return sorted([f for f in found if _a_loop(f["file"], f["line"])], key=lambda loop: (loop["file"], loop["line"]))


LOOP = re.compile(r"\b(?:for|while|do)\b")


def _a_loop(file: str, line: int) -> bool:
    """Whether the source line holds a loop: gcc also reports a loop it made itself (an array's `= {}`) at the
    function's first line, which is no loop of the student's."""
    try:
        lines = Path(file).read_text().splitlines()
    except OSError:
        return True
    return not 0 < line <= len(lines) or bool(LOOP.search(lines[line - 1]))


@dataclass
class Loop:
    file: str
    line: int
    vectorized: int = 0  # copies of the loop (template instances, versions) the compiler vectorized
    copies: int = 0  # copies it reported on
    how: str = ""  # e.g. "using 32 byte vectors"
    why_not: str = ""  # the first reason a copy was not vectorized


def parse_remarks(text: str) -> list[Loop]:
    """gcc's and clang's loop-vectorizer remarks, one Loop per source line, in the compiler's order.

    gcc says `couldn't vectorize loop` and then the reason on the next `not vectorized:` remark (often at
    another line, the statement to blame); clang gives the reason at the loop's own line.
    """
    found: dict[tuple, Loop] = {}
    pending: Loop | None = None  # a loop that missed, waiting for gcc's reason
    orphans: dict[tuple, str] = {}  # clang reasons that came before their loop's remark
    for m in map(REMARK.match, text.splitlines()):
        if not m:
            continue
        verdict, detail = _classify(m["msg"])
        key = (m["file"], int(m["line"]))
        if verdict == "why":  # gcc: the reason of the loop that just missed
            if pending and not pending.why_not:
                pending.why_not = detail
            pending = None
        elif verdict == "why here":  # clang: the reason of the loop at this line
            if key in found and not found[key].why_not:
                found[key].why_not = detail
            orphans.setdefault(key, detail)
        elif verdict:
            loop = found.setdefault(key, Loop(*key))
            loop.copies += 1
            loop.vectorized += verdict == "yes"
            loop.how = loop.how or (detail if verdict == "yes" else "")
            if verdict == "no":
                loop.why_not = loop.why_not or detail or orphans.get(key, "")
            pending = loop if verdict == "no" else None
    return list(found.values())


TAG = re.compile(r"\s*\[-Rpass(?P<kind>-missed|-analysis)?=[\w-]+\]$")


def _classify(msg: str) -> tuple[str | None, str]:
    """('yes', how), ('no', why), ('why', reason) or (None, '') for one remark's message."""
    tag = TAG.search(msg)
    kind = tag and (tag["kind"] or "pass")
    msg = TAG.sub("", msg).strip()
    if msg.startswith("loop vectorized"):  # gcc
        return "yes", msg.removeprefix("loop vectorized").strip()
    if msg.startswith("vectorized loop"):  # clang: (vectorization width: 8, interleaved count: 4)
        return "yes", msg.removeprefix("vectorized loop").strip().strip("()")
    if msg == "couldn't vectorize loop":  # gcc
        return "no", ""
    if msg.startswith("not vectorized: "):  # gcc's reason, maybe ending in the GIMPLE statement it means
        return "why", re.sub(r": [^:]*[=;].*$", "", msg.removeprefix("not vectorized: ")).rstrip(".")
    if kind == "-analysis":
        return "why here", msg.removeprefix("loop not vectorized: ")
    if kind == "-missed" and ("loop not vectorized" in msg or "vectorization is not beneficial" in msg):
        return "no", msg.removeprefix("loop not vectorized").lstrip(": ")
    return None, ""


def student_file(path: str, where: Path, family, variant) -> str:
    """The build's main.cpp / cuda.cu (written by load_inline) as the variant's own source; others as they are."""
    p = Path(path)
    if p.name in ("main.cpp", "cuda.cu") and (p.parent == where or not p.is_absolute()):
        ours = [s for s in variant.sources if s.endswith(".cu") == (p.name == "cuda.cu")]
        return str(family.path / ours[0]) if ours else path
    return path


def is_students(path: str, where: Path, family) -> bool:
    """The build's copy of the variant's sources, or a file in the family's folder (a header it includes)."""
    p = Path(path)
    if p.name in ("main.cpp", "cuda.cu") and (p.parent == where or not p.is_absolute()):
        return True
    return p.is_absolute() and p.resolve().is_relative_to(Path(family.path).resolve())
