"""What the benchmark scripts share: timing whole commands, a family's spec, and a verdict from two timings.

Kernels are timed in-process by playground.run.timing.bench (or playground.run, which calls it). A command
(a build, `kplay run` end to end) is timed here: a fresh process per run, the wall clock around it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Runs:
    """k runs of one command: the process's wall clock, and the number each run printed last (if any)."""

    walls: tuple[float, ...]
    printed: tuple[float, ...]

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def inner(self) -> float:
        """The median of what the runs printed (e.g. a build's own seconds, after `import torch`)."""
        return statistics.median(self.printed)

    @property
    def inner_range(self) -> tuple[float, float]:
        return min(self.printed), max(self.printed)


def results_name(what: str, machine: str) -> str:
    """A results file's name: the day, the commit measured and the machine first:
    DATE-COMMIT-MACHINE-WHAT, e.g. a linear run on the H200 (machine: h200 or cpu). KPLAY_COMMIT names the
    commit where the checkout's git is not the code's (the GPU box's copy of .git can lag the files)."""
    commit = os.environ.get("KPLAY_COMMIT") or subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    commit = commit or "nocommit"
    return f"{time.strftime('%Y-%m-%d')}-{commit}-{machine}-{what}"


def gpu_slug(name: str) -> str:
    """A GPU's model for a results file's name: 'NVIDIA H100 80GB HBM3' -> h100, 'NVIDIA H200' -> h200."""
    model = re.search(r"\b[A-Z]{1,2}\d{2,4}[A-Za-z]?\b", name)
    return model.group(0).lower() if model else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, str]:
    """One run's wall seconds and stdout; a failing command ends the benchmark with its stderr."""
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{shlex.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return seconds, done.stdout


def wall(cmd: list[str], env: dict | None = None) -> float:
    """One run's wall seconds (a step that happens once, in order, such as the first, cold run)."""
    return timed(cmd, env)[0]


def median_of(k: int, cmds: dict[str, list[str]], env: dict | None = None, fresh: tuple[str, ...] = ()) -> dict[str, Runs]:
    """k rounds in which the commands take turns, so load from other processes hits all alike.

    Each environment variable named in fresh points at a new, empty folder for every single run: a
    cold cache (KPLAY_CACHE, TORCH_EXTENSIONS_DIR) each time, as on an attendee's first run.
    """
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    printed: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(k):
        for name, cmd in cmds.items():
            with tempfile.TemporaryDirectory(prefix="kplay-bench-") as tmp:
                run_env = {**(env or os.environ), **{var: os.path.join(tmp, var.lower()) for var in fresh}}
                seconds, out = timed(cmd, run_env)
            walls[name].append(seconds)
            number = _last_number(out)
            if number is not None:
                printed[name].append(number)
    return {name: Runs(tuple(walls[name]), tuple(printed[name])) for name in cmds}


def _last_number(text: str) -> float | None:
    try:
        return float(text.split()[-1])
    except (IndexError, ValueError):
        return None


def verdict(mine, theirs) -> str:
    """FASTER or SLOWER where the interquartile ranges of two timings (Stats) are apart, else TIE."""
    if mine.q3_s < theirs.q1_s:
        return "FASTER"
    if mine.q1_s > theirs.q3_s:
        return "SLOWER"
    return "TIE"


def spec(family: str):
    """A family's spec.py module (tolerances, inputs, helpers such as spec.Linear)."""
    from playground.family import registry, spec as specs

    return specs.module(registry.find(family))


def load_line() -> str:
    """The machine's load averages: other work on a shared box moves every number here."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} cpus)"


def emit(text: str, out: str | None) -> None:
    """A benchmark's report: printed, and written to `out` when one is given."""
    print(text)
    if out:
        Path(out).write_text(text)


def nvbench_run(keep: Path):
    """Run every benchmark registered with nvbench (pip cuda-bench), its JSON to `keep`; then nvbench_states."""
    import cuda.bench as bench

    try:
        bench.run_all_benchmarks([sys.argv[0], "--json", str(keep)])
    except SystemExit:  # nvbench exits when it is done
        pass
    return nvbench_states(keep)


def nvbench_states(path: Path) -> list[tuple[str, dict, dict]]:
    """(benchmark name, {axis: value}, {summary tag: value}) of each state in nvbench's JSON."""
    found = []
    for mark in json.loads(Path(path).read_text())["benchmarks"]:
        for state in mark["states"]:
            axes = {a["name"]: a["value"] for a in state["axis_values"]}
            values = {s["tag"]: next((d["value"] for d in s["data"] if "value" in d), None)
                      for s in state.get("summaries", [])}
            found.append((mark["name"], axes, values))
    return found
