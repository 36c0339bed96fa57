"""What the top linear steps' main loops issue, from their SASS (no GPU needed): the math against the rest.

    python benchmarks/sass_loop.py [--out FILE]

Builds cuda-double-buffer, cuda-mma and cuda-pipeline through kplay (nvcc, and nvdisasm: the insight extra) and
takes each kernel's main loop: the backward branch whose body holds the most FFMA, DFMA or HMMA. It counts the body's
instructions by kind. The counts are the loop as compiled, both sides of any branch in it (the copy's test for
the matrix's edge, say); `pass` follows one route through it, the one a step in the middle of a large problem
takes (hot_pass): what one such pass issues, short of ncu's per-instruction counts. Register banks: two,
register number mod 2, as measured on Volta and Turing (Jia et al., "Dissecting the NVIDIA Volta GPU
Architecture via Microbenchmarking", 2018): an FFMA waits a cycle where its three sources not flagged .reuse
sit in one bank.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

from common import emit  # first: it puts the repository on sys.path

from playground.compiler import disasm
from playground.family import registry

STEPS = ["cuda-double-buffer", "cuda-mma", "cuda-pipeline"]
KINDS = [("math", ("FFMA", "DFMA", "HMMA")), ("sync", ("BAR", "DEPBAR", "LDGDEPBAR")), ("shared", ("LDS", "STS")),
         ("global", ("LDG", "STG")), ("convert", ("F2FP", "F2F", "I2F", "F2I"))]  # the first that matches
LABEL = re.compile(r"^([.$]L\w+):$")
TARGET = re.compile(r"([.$]L\w+)")


def opcode(instruction: str) -> str:
    """SASS's opcode with its modifiers, the predicate dropped: "@!P0 LDGSTS.E.128 [R1], ..." -> "LDGSTS.E.128"."""
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0]


def kind(op: str) -> str:
    return next((name for name, prefixes in KINDS if op.startswith(prefixes)), "other")


def main_loop(code: list[str], labels: bool = False) -> list[str]:
    """The body (label to backward branch) of the loop with the most math instructions; [] where none loops.
    Its labels kept where `labels`."""
    places = {m[1]: i for i, line in enumerate(code) if (m := LABEL.match(line))}
    best: list[str] = []
    for i, line in enumerate(code):
        target = TARGET.search(line) if opcode(line).startswith("BRA") else None
        start = places.get(target[1], len(code)) if target else len(code)
        if start < i:
            body = [c for c in code[start + 1:i + 1] if labels or not LABEL.match(c)]
            if sum(kind(opcode(c)) == "math" for c in body) > sum(kind(opcode(c)) == "math" for c in best):
                best = body
    return best


def weight(line: str) -> tuple[int, int, int, int]:
    """What an instruction adds to a pass: (math, bytes asked of global memory, shared loads, -1)."""
    op = opcode(line)
    size = next((b for m, b in ((".128", 16), (".64", 8), (".U16", 2), (".S16", 2), (".U8", 1)) if m in op), 4)
    return (kind(op) == "math", size * op.startswith(("LDG.", "LDGSTS")), op.startswith(("LDS", "LDSM")), -1)


def hot_pass(body: list[str]) -> list[str]:
    """One pass through a loop body (main_loop's, labels kept) as a step in the middle of a large problem takes
    it: of the routes along forward branches (no inner loop taken twice), one with the most math, then the most
    bytes from global memory, then the most shared loads, then the fewest instructions: every load made, by the
    cheapest route the compiler left (past the tests that a tile wholly inside skips, say)."""
    labels = {m[1]: i for i, line in enumerate(body) if (m := LABEL.match(line))}
    best: list[tuple | None] = [((0, 0, 0, 0), None)] + [None] * len(body)  # at line i: (score, (line, before))

    def reach(i: int, score: tuple, route) -> None:
        if best[i] is None or score > best[i][0]:
            best[i] = (score, route)

    for i, line in enumerate(body):
        if best[i] is None:
            continue
        score, route = best[i]
        if not LABEL.match(line):
            score, route = tuple(a + b for a, b in zip(score, weight(line))), (line, route)
        op = opcode(line) if not LABEL.match(line) else ""
        target = labels.get(TARGET.search(line)[1], -1) if op.startswith("BRA") else -1
        if target > i:
            reach(target, score, route)
        if i + 1 == len(body) or not op.startswith(("BRA", "EXIT")) or line.startswith("@"):
            reach(i + 1, score, route)
    lines, route = [], best[-1][1] if best[-1] else None
    while route:
        lines.append(route[0])
        route = route[1]
    return lines[::-1]


def bank_conflicts(body: list[str]) -> int:
    """FFMAs whose three sources not flagged .reuse are all even or all odd registers."""
    count = 0
    for c in body:
        if opcode(c) == "FFMA":
            sources = [int(r) for r, reuse in re.findall(r"\bR(\d+)(\.reuse)?", c)[1:] if not reuse]
            count += len(sources) == 3 and len({r % 2 for r in sources}) == 1
    return count


def row(step: str, name: str, labelled: list[str]) -> str:
    body, one = [c for c in labelled if not LABEL.match(c)], hot_pass(labelled)
    ops = Counter(opcode(c) for c in body)
    by_kind = Counter({k: 0 for k, _ in KINDS} | {"other": 0})
    for op, n in ops.items():
        by_kind[kind(op)] += n
    math = by_kind["math"]
    top = ", ".join(f"{op} {n}" for op, n in ops.most_common() if kind(op) == "other")
    cells = " | ".join(str(by_kind[k]) for k, _ in KINDS[1:])
    return (f"| `{step}` | {name} | {len(body)} | {math} | {len(body) / max(math, 1):.2f} | {cells} | "
            f"{by_kind['other']} | {bank_conflicts(body)} | {len(one)} | {(len(one) - math) / max(math, 1):.2f} | "
            f"{top[:48]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    family = registry.find("linear")
    rows = []
    for step in STEPS:
        found, _, _ = disasm.compiled("sass", family, family.variants[step], {}, lambda *_, **__: None)
        for f in found:
            code = [c for g in f.groups for c in g.code]
            rows.append(row(step, f.name.split("(")[0].removeprefix("void "), main_loop(code, labels=True)))
    lines = ["# linear's top CUDA steps: what their main loops issue, from the SASS", "",
             "made by: python benchmarks/sass_loop.py; kplay builds with nvcc for sm_90, nvdisasm reads the cubin, "
             "no GPU. A loop's instructions as compiled (both sides of its branches); per math: instructions for "
             "each FFMA, DFMA or HMMA; bank: FFMAs with three non-reused sources in one of two register banks; "
             "pass: the instructions one pass issues on the route of a step in the middle of a large problem "
             "(hot_pass), and its others (not math) per math.", "",
             "| step | kernel | loop | math | per math | sync | shared | global | convert | other | bank | pass | "
             "others per math | the other opcodes |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|", *rows]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
