"""What the child is doing, on stderr while it works: a spinner, one line per finished build, a sweep's bar."""

from __future__ import annotations

from contextlib import contextmanager

from ..core import events

PHASES = {"time": "timing", "profile": "profiling", "ncu": "profiling under ncu",
          "pool": "sent to the pool: graded when a worker is free"}


@contextmanager
def spinner(console):
    """A spinner with elapsed seconds while compiling; one line per finished build."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_interactive) as progress:  # TTY_INTERACTIVE=0
        task = progress.add_task("starting (importing torch)", total=None)
        yield _events(progress, task)


@contextmanager
def sweep_bar(console, total: int, key: str):
    """A bar over the points, the current step of the current point beside it."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn("{task.fields[point]}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=True, disable=not console.is_interactive) as progress:
        task = progress.add_task("starting", total=total, point="")

        def on_point(k, request):
            progress.update(task, completed=k, point=f"{key}={request.sizes[key]:,}", description="starting (importing torch)")

        yield on_point, _events(progress, task, cached_lines=False)
        progress.update(task, completed=total)


def _events(progress, task, cached_lines: bool = True):
    """The child's events as progress: what it does now, and one line per finished build."""

    def on_event(event, **data):
        if event == events.BUILD_START:
            progress.update(task, description=f"compiling {data['variant']}")
        elif event == events.BUILD_DONE and (cached_lines or not data["cached"]):
            how = "cached build" if data["cached"] else f"compiled in {data['seconds']:.1f} s"
            progress.console.print(f"[green]✓[/] {data['variant']}: {how}", highlight=False)
        elif event == events.CHECK:
            progress.update(task, description=f"checking {data['variant']} at {data['case']}")
        elif event == events.PHASE and data["phase"] in PHASES:
            progress.update(task, description=PHASES[data["phase"]])
        elif event == events.WAIT:
            progress.update(task, description=f"waiting for the {data['device'].partition('-')[0].upper()}: "
                                              "another run is timing on it")

    return on_event
