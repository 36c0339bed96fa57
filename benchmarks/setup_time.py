"""The README's two set-up commands, as a new user runs them: a fresh clone of HEAD, a fresh venv, not
activated; each command's wall clock and what it printed last, then `-m "not slow"` alone.

    python3 benchmarks/setup_time.py            # writes benchmarks/results/DATE-COMMIT-cpu-setup.md

One run of each (the install alone takes minutes): quote it with the machine's load in mind. Beside them, the
floor of any run, `import torch` in the new venv (median of three): it tells one machine from another.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, median_of, results_name, timed  # noqa: E402

from playground.compiler.toolchain import cpu_model  # noqa: E402

COMMANDS = {  # the README's, word for word
    "1. install and the main job": 'python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/kplay run sum --n 1e7',
    "2. the test extra and the tests": '.venv/bin/pip install ".[dev]" && .venv/bin/python -m pytest -n 2 --dist loadfile',
    'the tests, -m "not slow"': '.venv/bin/python -m pytest -n 2 --dist loadfile -m "not slow"',
}


def _import_torch(venv_parent: str, env: dict) -> tuple[float, str]:
    """`import torch` in the new venv, a fresh process each time: the median of three, in seconds; its version."""
    cmd = [f"{venv_parent}/.venv/bin/python", "-c", "import torch; print(torch.__version__)"]
    return median_of(3, {"torch": cmd}, env)["torch"].wall, timed(cmd, env)[1].strip()


def main() -> None:
    rows, floor = [], None
    with tempfile.TemporaryDirectory(prefix="kplay-setup-") as tmp:
        subprocess.run(["git", "clone", "-q", str(ROOT), tmp], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        for what, command in COMMANDS.items():
            start = time.perf_counter()
            done = subprocess.run(["bash", "-c", command], cwd=tmp, env=env, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            last = (done.stdout.strip().splitlines() or [""])[-1]
            rows.append((what, command, seconds, done.returncode, re.sub(r"\x1b\[[0-9;]*m", "", last)))
            print(f"{what}: {seconds:.0f} s, exit {done.returncode}: {last}", flush=True)
            if what.startswith("1.") and done.returncode == 0:  # command 1 made the venv: the floor any run pays
                floor = _import_torch(tmp, env)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [f"# The README's set-up commands from a fresh clone of {commit}, {time.strftime('%Y-%m-%d')}", "",
             f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; one run of each,",
             "the venv new and not activated (benchmarks/setup_time.py).", "",
             "| command | seconds | exit | its last line |", "|---|---|---|---|"]
    lines += [f"| {what}: `{command}` | {seconds:.0f} | {code} | {last} |" for what, command, seconds, code, last in rows]
    lines += ["", f"The floor, in the same run: `python -c 'import torch'` in the new venv (torch {floor[1]}), "
              f"{floor[0]:.2f} s (median of 3)" if floor else "No floor: command 1 failed.",
              f"on this machine ({cpu_model()}): machines differ, and this tells by how much." if floor else ""]
    out = ROOT / "benchmarks" / "results" / results_name("setup.md", "cpu")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
