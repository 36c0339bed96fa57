"""A student's folder, as `kplay start` wrote it: its exercise table, whose it is, and the hints shown so far."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

from ..core.errors import KplayError, UsageError
from ..family import registry

HINTS_FILE = ".kplay-hints.json"  # how many hints the student has seen


def table(folder: Path) -> dict:
    """The exercise table of a started folder's task.toml."""
    fam = registry.load_family(folder)
    found = fam.exercise
    if not isinstance(found, dict):
        raise UsageError(f"{folder} is not an exercise folder (kplay start NAME/VARIANT DIR writes one)")
    return found


def next_hint(folder: Path, number: int | None = None) -> tuple[dict | None, int, int]:
    """The next hint, or hint `number` again (None once all were shown), how many were shown before, how many
    there are; how far the student got is remembered."""
    hints = table(folder)["hints"]
    seen = folder / HINTS_FILE
    try:
        shown = int(json.loads(seen.read_text())["shown"])
    except (OSError, ValueError, KeyError, TypeError):
        shown = 0
    if number is not None and not 1 <= number <= len(hints):
        raise UsageError(f"hint {number}: this exercise has hints 1 to {len(hints)}")
    k = shown if number is None else number - 1
    if k >= len(hints):
        return None, shown, len(hints)
    seen.write_text(json.dumps({"shown": max(shown, k + 1)}) + "\n")
    return hints[k], shown, len(hints)


def student(folder: Path) -> str:
    """Who the record is for: the name `kplay start` was given (or $KPLAY_STUDENT then), else the login and the
    start's id, so that two folders of one shared login are two students."""
    ex = table(folder)
    if ex.get("student"):
        return ex["student"]
    try:
        login = folder.owner()
    except (KeyError, NotImplementedError, OSError):
        login = getpass.getuser()
    return f"{login}-{ex['id']}" if ex.get("id") else login


def unusable(folder: Path, name: str | None, error: KplayError) -> dict:
    """`check --json`'s record when no dtype could run (a CUDA exercise with no GPU): the reason, for the board."""
    try:
        ex, who = table(folder), name or student(folder)
    except KplayError:
        ex, who = {"family": "", "variant": ""}, name or folder.name
    return {"student": who, "family": ex["family"], "variant": ex["variant"], "passed": 0, "checked": 0,
            "failures": {}, "speedup": None, "baseline": None, "exit_code": error.exit_code, "dtypes": [],
            "error": str(error), "what": f"could not run: {error}", "run": {}}
