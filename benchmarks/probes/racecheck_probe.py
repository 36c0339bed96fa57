"""Why racecheck of cuda-warp-specialized runs long: the step as it is, and a copy with its setmaxnreg left out.

    python benchmarks/probes/racecheck_probe.py [--limit 150] [--tools memcheck,racecheck]

A sanitizer instruments the kernel with code that needs registers of its own, and the step moves registers
between warpgroups (setmaxnreg.dec 40 in the producer, .inc 232 in the consumers); a warpgroup whose .inc
cannot be granted waits. Each run is `kplay run DIR --variant cuda-warp-specialized --sanitize TOOL` at the
family's sanitize size (33, 65, 129), in a folder of its own (kplay eject), bounded by --limit seconds:
its exit, its seconds and its last line. Needs the H100 or H200 (sm_90a) and compute-sanitizer.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, str(Path(__file__).resolve().parents[2] / "cli.py")]
VARIANT = "cuda-warp-specialized"
SIZE = ["--batch", "33", "--in", "65", "--out", "129"]


def ejected(folder: Path, without_setmaxnreg: bool) -> Path:
    """linear's solution ejected to `folder`; its setmaxnreg calls made comments where asked."""
    subprocess.run([*CLI, "eject", "linear", str(folder), "--variant", VARIANT, "--solution"], check=True,
                   capture_output=True)
    if without_setmaxnreg:
        source = next(folder.glob("*warp_specialized.cu"))
        text, count = re.subn(r"^(\s*)(setmaxnreg_(?:dec|inc)<\d+>\(\);)", r"\1// \2", source.read_text(), flags=re.M)
        assert count == 2, f"expected two setmaxnreg calls in {source.name}, found {count}"
        source.write_text(text)
    return folder


def one(folder: Path, tool: str, limit: float) -> str:
    start = time.perf_counter()
    try:
        done = subprocess.run([*CLI, "run", str(folder), "--device", "cuda", "--variant", VARIANT, *SIZE,
                               "--sanitize", tool, "--no-bench"], capture_output=True, text=True, timeout=limit)
        said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        return f"exit {done.returncode} in {time.perf_counter() - start:.1f} s; {said[-1].strip() if said else ''}"
    except subprocess.TimeoutExpired:
        return f"still running after {limit:.0f} s (stopped)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=150.0, help="seconds a run may take")
    parser.add_argument("--tools", default="memcheck,racecheck")
    args = parser.parse_args()
    print(f"# racecheck of {VARIANT}: with and without setmaxnreg ({' x '.join(SIZE[1::2])})\n")
    with tempfile.TemporaryDirectory() as tmp:
        for without in (False, True):
            folder = ejected(Path(tmp) / ("without" if without else "as-is"), without)
            for tool in args.tools.split(","):
                print(f"- {'without' if without else 'with'} setmaxnreg, {tool}: {one(folder, tool, args.limit)}",
                      flush=True)


if __name__ == "__main__":
    main()
