"""kplay watch: rerun a kernel folder on every save; once it passes, its time against the last passing version."""

from __future__ import annotations

import itertools
import logging
import queue
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from rich.console import Group
from rich.rule import Rule
from rich.text import Text

from ..core.errors import KplayError, UsageError
from ..run.compare import verdict

# A save of one of these reruns the kernel; an editor's swap and backup files (.swp, ~, #x#) do not.
SOURCES = (".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp", ".toml", ".py")
DEBOUNCE_MS = 400  # an editor's save is several events (write, rename, chmod): one run for all of them
STEP_MS = 50  # the quiet time that ends a batch


def folder(path: str) -> Path:
    """The folder to watch, resolved: it must be a kernel folder (one with a task.toml)."""
    p = Path(path)
    if not p.is_dir():
        raise UsageError(f"{path}: no such folder")
    if not (p / "task.toml").is_file():
        raise UsageError(f"{path} is not a kernel folder: it has no task.toml (kplay eject sum {shlex.quote(str(path))} writes one)")
    return p.resolve()


def changes(root: Path, stop=None) -> Iterator[set[str]]:
    """Each batch of saved sources under root (watchfiles); ends on Ctrl-C or when `stop` (an Event) is set."""
    try:
        import watchfiles
    except ImportError:
        raise UsageError(f"kplay watch needs watchfiles: {sys.executable} -m pip install watchfiles") from None

    logging.getLogger("watchfiles").setLevel(logging.ERROR)  # its "KeyboardInterrupt caught" line: kplay says it

    def source(change, path: str) -> bool:
        return path.endswith(SOURCES) and "__pycache__" not in path

    batches = watchfiles.watch(root, watch_filter=source, debounce=DEBOUNCE_MS, step=STEP_MS, stop_event=stop,
                               raise_interrupt=False)
    return ({p for _, p in batch} for batch in batches)  # not a generator itself: a missing watchfiles says so now


@dataclass(frozen=True)
class Outcome:
    """One run of the watched folder: its record or the error that ended it, and the times it is compared with."""

    number: int  # 1 for the run at the start, then one per batch of saves
    changed: tuple[str, ...]  # the files whose save started it (none for the first)
    seconds: float  # from the save (the batch's arrival) to the verdict
    result: dict | None = None  # the run's record; None when the build failed or the kernel crashed
    error: KplayError | None = None
    before: dict = field(default_factory=dict)  # variant -> time of its last passing version, for those compared


def loop(attempt: Callable[[], dict], batches: Iterable[set[str]]) -> Iterator[Outcome]:
    """Run once now, then once per batch of changes; an error is an outcome too, and the loop goes on.

    `attempt` runs the kernel (isolate.run on a fresh request) and raises KplayError when it cannot.
    """
    last: dict[str, dict] = {}  # variant -> the time of its last passing, timed version
    for number, batch in enumerate(itertools.chain([set()], batches), start=1):
        start = time.perf_counter()
        try:
            result, error = attempt(), None
        except KplayError as e:
            result, error = None, e
        seconds = time.perf_counter() - start
        before = {}
        for v in passed(result):
            if v["variant"] in last:
                before[v["variant"]] = last[v["variant"]]
            last[v["variant"]] = v["time"]
        yield Outcome(number, tuple(sorted(Path(p).name for p in batch)), seconds, result, error, before)


def serve(attempt: Callable[[], dict], root: Path, show: Callable) -> None:
    """kplay watch: the loop on the folder's saves, each outcome shown, until Ctrl-C. Each run forks from a
    warm worker that has imported torch (isolate.warm)."""
    from ..child import spawn as isolate

    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C ends it, even where SIGINT came ignored
    batches = changes(root)  # before the first run: a missing watchfiles is an error, not a run that then fails
    saves: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [saves.put(b) for b in batches], daemon=True).start()
    try:  # a save during a run stops it, its compiler too (a hung kernel would hold it until its --timeout)
        with isolate.warm(), isolate.stopped_by(lambda: not saves.empty()):
            for outcome in loop(attempt, _merged(saves)):
                show(render(outcome))
    except KeyboardInterrupt:  # the child and its build are killed on the way out (isolate.run's finally)
        pass


def _merged(saves: queue.Queue) -> Iterator[set[str]]:
    """The batches of saves, those that queued up during a run as one."""
    while True:
        try:
            batch = saves.get(timeout=0.2)  # a timeout: Ctrl-C is seen while waiting
        except queue.Empty:
            continue
        while not saves.empty():
            batch |= saves.get_nowait()
        yield batch


def passed(result: dict | None) -> list[dict]:
    """The variants of a run that passed the check and were timed."""
    return [v for v in (result or {}).get("variants", []) if v["check"]["ok"] and v.get("time")]


def comparison(variant: str, now: dict, before: dict | None) -> Text:
    """`cpp: 110 µs, 1.9× faster than the last passing version (205 µs)`, with compare.verdict's word."""
    from ..report.tables import seconds

    head = f"{variant}: {seconds(now['median_s'])}"
    if before is None:
        return Text(f"{head}, the first passing version", style="bold")
    word = verdict(before, now)
    was = f"the last passing version ({seconds(before['median_s'])})"
    if word == "same":
        return Text(f"{head}, the same as {was} within the measured noise", style="bold")
    ratio = before["median_s"] / now["median_s"] if word == "faster" else now["median_s"] / before["median_s"]
    return Text(f"{head}, {ratio:.1f}× {word} than {was}", style="bold " + ("green" if word == "faster" else "red"))


def render(o: Outcome) -> Group:
    """A rule naming the run, then the compact report, or the error's line and the compiler's first errors."""
    from ..report.tables import run_report

    what = f"saved {', '.join(o.changed)}" if o.changed else "start"
    parts = [Rule(f"run {o.number} · {what} · {o.seconds:.1f} s", align="left", style="dim")]
    if o.error is not None:
        parts.append(Text.assemble(("error: ", "red"), str(o.error)))
        parts += [Text(line) for line in getattr(o.error, "details", [])]
    else:
        parts.append(run_report(o.result, compact=True))
        parts += [comparison(v["variant"], v["time"], o.before.get(v["variant"])) for v in passed(o.result)]
    parts.append(Text("watching for the next save (Ctrl-C ends)", style="dim"))
    return Group(*parts)
