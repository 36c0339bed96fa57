"""kplay watch, timed: a one-line edit of an ejected sum cpp → the verdict, beside the compile alone.

    python benchmarks/watch_loop.py [--edits 5] [--n 1e5]

The real loop (watchfiles on the folder, isolate.run per save, --no-bench): each edit changes one
comment line, so the content hash changes and the source is compiled again. The time runs from the
write to the outcome (the watcher's debounce, the fresh process importing torch, the compile, the check).
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KPLAY_CACHE"] = f"{tmp}/cache"
        folder = Path(tmp) / "sum"
        subprocess.run([sys.executable, str(ROOT / "cli.py"), "eject", "sum", str(folder), "--variant", "cpp"],
                       check=True, capture_output=True)
        from playground import isolate, request, watch

        src = folder / "sum.cpp"
        attempt = lambda: isolate.run(request.make(str(folder), device="cpu", sizes={"n": args.n}, bench=False))
        loops, compiles, written = [], [], None

        def edit(k: int) -> None:
            nonlocal written
            src.write_text(src.read_text() + f"// edit {k}\n")  # one line: a new content hash, a new build
            written = time.perf_counter()
        for k, outcome in enumerate(watch.loop(attempt, watch.changes(folder))):
            assert outcome.result and outcome.result["ok"], outcome.error
            if written is not None:
                loops.append(time.perf_counter() - written)
                compiles.append(outcome.result["variants"][0]["build"]["seconds"])
                print(f"edit {k}: {loops[-1]:.2f} s to the verdict, compile {compiles[-1]:.2f} s", flush=True)
            if k == args.edits:
                break
            threading.Timer(1.0, edit, (k,)).start()  # once the watcher is up (it starts after the first run)

    print(f"median of {len(loops)}: edit → verdict {statistics.median(loops):.2f} s, "
          f"compile alone {statistics.median(compiles):.2f} s")


if __name__ == "__main__":
    main()
