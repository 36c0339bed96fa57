"""kplay watch, timed: a one-line edit of an ejected sum cpp → the verdict, beside the compile alone.

    python benchmarks/watch_loop.py [--edits 5] [--n 1e5] [--device cuda --variant fast --file sum_fast.cu]

The real loop (watchfiles on the folder, isolate.run per save, --no-bench, the warm worker as kplay watch
has it): each edit changes one comment line, so the content hash changes and the source is compiled again;
each touch rewrites the same text (a rerun of unchanged source: the cached build). The time runs from the
write to the outcome (the watcher's debounce, the fork, the compile, the check). Beside it, in the same run:
the same edits with a fresh worker per run (KPLAY_ZYGOTE=0, the loop before the warm worker) and the floor
a fresh worker pays, `import torch`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=5)
    ap.add_argument("--n", default="1e5")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--variant", default="cpp")
    ap.add_argument("--file", default="sum.cpp", help="the ejected source the edits change")
    args = ap.parse_args()
    from playground.child import spawn as isolate

    with isolate.warm():
        edits, compiles = loop(args, change=True)
        touches, _ = loop(args, change=False)
    os.environ["KPLAY_ZYGOTE"] = "0"
    cold, _ = loop(args, change=True)
    torch_s = statistics.median(_seconds([sys.executable, "-c", "import torch"]) for _ in range(3))
    print(f"medians of {args.edits}: edit → verdict {statistics.median(edits):.2f} s (compile alone "
          f"{statistics.median(compiles):.2f} s); unchanged source → verdict {statistics.median(touches):.2f} s; "
          f"fresh worker per run: edit → verdict {statistics.median(cold):.2f} s; import torch {torch_s:.2f} s")


def loop(args, change: bool) -> tuple[list[float], list[float]]:
    """(seconds from each write to its verdict, each build's seconds) over args.edits writes of args.file."""
    from playground.child import spawn as isolate
    from playground.family import request
    from playground.workshop import watch

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KPLAY_CACHE"] = f"{tmp}/cache"
        folder = Path(tmp) / "sum"
        subprocess.run([sys.executable, str(ROOT / "cli.py"), "eject", "sum", str(folder), "--variant", args.variant,
                        "--solution"], check=True, capture_output=True)
        src = folder / args.file
        attempt = lambda: isolate.run(request.make(str(folder), device=args.device, variant=args.variant,
                                                   sizes={"n": args.n}, bench=False))
        loops, compiles, written = [], [], None

        def edit(k: int) -> None:
            nonlocal written
            src.write_text(src.read_text() + (f"// edit {k}\n" if change else ""))  # a new hash, or the same
            written = time.perf_counter()
        for k, outcome in enumerate(watch.loop(attempt, watch.changes(folder))):
            assert outcome.result and outcome.result["ok"], outcome.error
            if written is not None:
                loops.append(time.perf_counter() - written)
                compiles.append(outcome.result["variants"][0]["build"]["seconds"])
                print(f"{'edit' if change else 'touch'} {k}: {loops[-1]:.2f} s to the verdict, "
                      f"build {compiles[-1]:.2f} s", flush=True)
            if k == args.edits:
                break
            threading.Timer(1.0, edit, (k,)).start()  # once the watcher is up (it starts after the first run)
    return loops, compiles


def _seconds(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
