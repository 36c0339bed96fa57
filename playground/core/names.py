"""Kernel and function names as a person reads them: no return type, no parameters, no namespaces."""

from __future__ import annotations

import re

OPEN, CLOSE = "<([{", ">)]}"

WIDTH = 30  # of a kernel's name in a profile's tables


def _top_level(text: str):
    """(index, char, depth) for each character, the depth counted over <>, (), [] and {}."""
    depth = 0
    for i, c in enumerate(text):
        if c in CLOSE:
            depth -= 1
        yield i, c, depth
        if c in OPEN:
            depth += 1


def _split_args(text: str) -> list[str]:
    """'512, 1, ReduceOp<float, 4>' -> ['512', '1', 'ReduceOp<float, 4>'] (commas at depth 0 only)."""
    parts, start = [], 0
    for i, c, depth in _top_level(text):
        if c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return parts + [text[start:].strip()]


def _unqualified(name: str) -> str:
    """'at::native::reduce_kernel<...>' -> 'reduce_kernel<...>' (the last top-level '::' part)."""
    cut = 0
    for i, c, depth in _top_level(name):
        if depth == 0 and name.startswith("::", i):
            cut = i + 2
    return name[cut:]


def short_name(signature: str, width: int = 40) -> str:
    """'void at::native::reduce_kernel<512, 1, at::native::ReduceOp<...> >(...)' -> 'reduce_kernel<512, 1, ReduceOp<...>>'.

    No return type, no parameters, no namespaces; template arguments shortened past `width` characters,
    and a name still longer than that cut.
    """
    name = re.sub(r"( \[clone [^]]*\])+$", "", signature.strip())  # GCC's .cold (or .isra) copies
    name = re.sub(r"( const| volatile| &&| &)+$", "", name)  # a method's qualifiers
    if name.endswith(")"):  # the parameter list: from the '(' that matches the last ')'
        starts = [i for i, c, depth in _top_level(name) if c == "(" and depth == 0]
        name = name[:starts[-1]] if starts else name
    spaces = [i for i, c, depth in _top_level(name) if c == " " and depth == 0]
    name = _unqualified(name[spaces[-1] + 1:] if spaces else name)  # the return type (void) goes
    base, lt, args = name.partition("<")
    if len(name) <= width:
        return name.replace("> >", ">>")
    if not lt or len(base) > width - 6:  # cuBLAS's sm90_xmma_gemm_..._kernel: its start
        return name[:width - 3] + "..."
    shown = []
    for arg in _split_args(args.rstrip().removesuffix(">")):
        arg = _unqualified(arg)
        arg = arg.split("<")[0] + "<...>" if "<" in arg else arg
        if len(base) + len(", ".join([*shown, arg])) + 2 > width:
            shown.append("...")
            break
        shown.append(arg)
    return f"{base}<{', '.join(shown)}>"
