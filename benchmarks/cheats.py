"""The timing cheats, timed as a student would run them: `kplay run` on each known-wrong GPU kernel, no --no-bench.

Each cheat (tests/wrong/<family>/wrong.toml, mode "cuda") is built from the registry copy, as the test
builds it, and run end to end at 80 columns beside the honest variant it was edited from. The report
keeps each run's exit code, its verdict and its whole output.

    python3 benchmarks/cheats.py --n 1e8 --out cheats.md
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, emit

sys.path.insert(0, str(ROOT / "tests"))
from test_wrong import _known_wrong, wrong_folder  # noqa: E402  (the test's own way to build a cheat)


def kplay(*args: str) -> tuple[int, str]:
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([sys.executable, str(ROOT / "cli.py"), "run", *args], env=env, capture_output=True,
                          text=True)
    return done.returncode, (done.stdout + done.stderr).rstrip()


def with_n(argv: list[str], n: str) -> list[str]:
    """The manifest's arguments with its --n, if any, replaced by n (kplay refuses an option given twice)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--n":
            i += 2
            continue
        out += [] if argv[i].startswith("--n=") else [argv[i]]
        i += 1
    return [*out, "--n", n]


def section(title: str, rc: int, expected: int, output: str) -> str:
    mark = "as expected" if rc == expected else f"EXPECTED {expected}"
    return f"## {title}: exit {rc} ({mark})\n\n```\n{output}\n```\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="1e8")
    parser.add_argument("--out")
    args = parser.parse_args()
    parts = [f"# The timing cheats, timed (kplay run --device cuda --n {args.n}, 80 columns)\n"]
    with tempfile.TemporaryDirectory(prefix="kplay-cheats-") as tmp:
        for param in _known_wrong():
            family, entry = param.values
            if entry.get("mode") != "cuda":
                continue
            folder = wrong_folder(Path(tmp) / entry["name"], family, entry)
            rc, out = kplay(str(folder), "--device", "cuda", *with_n(entry.get("args", []), args.n))
            parts.append(section(f"{family}/{entry['name']}", rc, entry["exit"], out))
            if entry["says"] not in " ".join(out.split()):
                parts.append(f"**Missing from the verdict:** {entry['says']!r}\n")
        rc, out = kplay("sum", "--device", "cuda", "--variant", "fast", "--n", args.n)
        parts.append(section("sum/fast, the honest kernel they were edited from", rc, 0, out))
    emit("\n".join(parts), args.out)


if __name__ == "__main__":
    main()
