"""Two sum_gpu.py records side by side: the median of every (n, dtype, contender), and the change.

    python3 benchmarks/compare_sum.py OLD.json NEW.json       # a path, or git:REV:PATH
"""

import json
import subprocess
import sys


def load(where: str) -> dict:
    if where.startswith("git:"):
        return json.loads(subprocess.check_output(["git", "show", where[4:]]))
    with open(where) as f:
        return json.load(f)


def medians(record: dict) -> dict:
    return {(r["n"], r["dtype"], r["variant"]): r["median_us"] for r in record["rows"]}


def main() -> None:
    old, new = (medians(load(w)) for w in sys.argv[1:3])
    print(f"{'n':>6} {'dtype':8} {'contender':16} {'old µs':>9} {'new µs':>9} {'change':>7}")
    for key in sorted(old.keys() & new.keys(), key=lambda k: (k[1], k[0], k[2])):
        n, dtype, name = key
        print(f"{n:>6.0e} {dtype:8} {name:16} {old[key]:9.1f} {new[key]:9.1f} {100 * (new[key] / old[key] - 1):+6.1f}%")


if __name__ == "__main__":
    main()
