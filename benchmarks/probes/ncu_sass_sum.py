"""What ncu's per-instruction counts say of a kernel (ncu_stalls.sh's NAME-sass.csv.gz): the instructions its
warps executed by kind, the others (not math) for each math instruction as it ran (the o of mma_model.py,
counted, not read off one route of the SASS), and where its stall samples fall, by kind and the top lines.

    python benchmarks/probes/ncu_sass_sum.py FILE.csv[.gz] ... [--top 10]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: sass_loop

from sass_loop import kind, opcode  # noqa: E402

EXECUTED, SAMPLES = "Instructions Executed", "Warp Stall Sampling (All Samples)"


def rows(text: str) -> list[dict[str, str]]:
    """The table under ncu's source page: from the header that names the SASS and its executed counts."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Source" in line and EXECUTED in line), None)
    if start is None:
        raise SystemExit(f"no header with `Source` and `{EXECUTED}`: is this ncu's --page source --csv?")
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def number(cell: str | None) -> float:
    try:
        return float((cell or "0").replace(",", ""))
    except ValueError:
        return 0.0


def summary(name: str, table: list[dict[str, str]], top: int) -> list[str]:
    executed, samples, lines = Counter(), Counter(), []
    for row in table:
        op = opcode(row["Source"].strip()) if row["Source"].strip() else ""
        executed[kind(op)] += number(row.get(EXECUTED))
        samples[kind(op)] += number(row.get(SAMPLES))
        lines.append((number(row.get(SAMPLES)), row["Source"].strip()))
    math, total, stalled = executed["math"], sum(executed.values()), sum(samples.values()) or 1
    out = [f"## {name}", "", f"executed (warp instructions): {total:,.0f}; math {math:,.0f}; others for each math: "
           f"{(total - math) / max(math, 1):.2f}", "", "| kind | executed | stall samples |", "|---|---:|---:|"]
    out += [f"| {k} | {executed[k]:,.0f} | {100 * samples[k] / stalled:.1f}% |" for k, _ in executed.most_common()]
    out += ["", f"the {top} lines with the most stall samples:", ""]
    out += [f"- {100 * s / stalled:.1f}% {src}" for s, src in sorted(lines, reverse=True)[:top]]
    return out + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    for f in args.files:
        raw = Path(f).read_bytes()
        text = (gzip.decompress(raw) if f.endswith(".gz") else raw).decode(errors="replace")
        print("\n".join(summary(Path(f).name.split("-sass")[0], rows(text), args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
