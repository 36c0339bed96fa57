"""Exercises: an exercise's starter written to a student's folder, the folder graded, hints shown in turn.

The starter is made from the solution's `// kplay:todo` regions (markers.py).
"""

from __future__ import annotations

import getpass
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from . import registry, render
from .errors import BuildError, KplayError, UsageError
from .markers import Hint, starter_files

HINTS_FILE = ".kplay-hints.json"  # how many hints the student has seen

def is_exercise(fam: registry.Family) -> bool:
    """A built-in family marked `exercise = true`: show and eject give the starter."""
    return fam.exercise is True


def starter_sources(fam: registry.Family, variant: registry.Variant, params: dict) -> dict[str, str]:
    """The variant's rendered sources as the starter has them (for `kplay show`)."""
    return starter_files(render.sources(fam, variant, params), fam.path)[0]


def pick(fam: registry.Family, variant: str | None) -> registry.Variant:
    """The variant to start: by name, else the family's default, else its first with a region."""
    if variant:
        return fam.variant(variant)
    if fam.default_variant in fam.variants and _hints(fam, fam.variants[fam.default_variant], fam.parse_params([])):
        return fam.variant(fam.default_variant)
    for v in fam.variants.values():
        if _hints(fam, v, fam.parse_params([])):
            return v
    raise UsageError(f"{fam.name} has no // kplay:todo regions: nothing to start")


def _hints(fam, variant, params) -> list[Hint]:
    files = {**render.sources(fam, variant, params), **{n: render.header(fam, variant, n) for n in variant.includes}}
    return starter_files(files, fam.path)[1]


def start(fam: registry.Family, variant: registry.Variant, folder: Path, params: dict, force: bool = False) -> list[Path]:
    """Write the starter of one variant into folder, after building it once (a marking that breaks the build is refused)."""
    from .scaffold import eject

    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())) and not force:
        raise UsageError(f"{folder} is not empty: a student's files are never overwritten (use --force)")
    hints = _hints(fam, variant, params)
    if not hints:
        raise UsageError(f"{fam.name}/{variant.name} has no // kplay:todo regions: nothing to start")
    table = {"family": fam.name, "variant": variant.name, "hints": [asdict(h) for h in hints]}
    with tempfile.TemporaryDirectory(prefix="kplay-starter-") as tmp:
        eject(fam, Path(tmp), [variant], params, starter=True, exercise=table)
        _compiles(registry.load_family(Path(tmp)), variant, params, f"{fam.name}/{variant.name}", tmp)
    return eject(fam, folder, [variant], params, force=True, starter=True, exercise=table)


def _compiles(starter: registry.Family, variant: registry.Variant, params: dict, what: str, where: str) -> None:
    """Build the starter here (CUDA compiles and links without a GPU); a failure is the marking's fault."""
    import logging

    from .build import build

    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found" on CPU boxes
    try:
        build(starter, starter.variants[variant.name], params)
    except BuildError as e:
        first = next((d.strip() for d in e.details if "error" in d), str(e)).replace(where + "/", "")
        raise UsageError(f"the starter of {what} does not compile (fix the marking or add a // kplay:stub); "
                         f"at the starter's line {first}") from None


def table(folder: Path) -> dict:
    """The exercise table of a started folder's task.toml."""
    fam = registry.load_family(folder)
    found = fam.exercise
    if not isinstance(found, dict):
        raise UsageError(f"{folder} is not an exercise folder (kplay start NAME/VARIANT DIR writes one)")
    return found


def next_hint(folder: Path) -> tuple[dict | None, int, int]:
    """The next hint (None once all were shown), how many were shown before, how many there are; it is remembered."""
    hints = table(folder)["hints"]
    seen = folder / HINTS_FILE
    try:
        shown = int(json.loads(seen.read_text())["shown"])
    except (OSError, ValueError, KeyError, TypeError):
        shown = 0
    if shown >= len(hints):
        return None, shown, len(hints)
    seen.write_text(json.dumps({"shown": shown + 1}) + "\n")
    return hints[shown], shown, len(hints)


def student(folder: Path) -> str:
    """Who owns the folder (the student's login), else who runs kplay."""
    try:
        return folder.owner()
    except (KeyError, NotImplementedError, OSError):
        return getpass.getuser()


def grade(folder: Path, device: str, name: str | None, on_event, timeout: float = 120.0) -> dict:
    """Run the folder's variant through the child (`kplay run`'s path) and score it; a build error or crash scores 0."""
    from . import isolate, request

    ex = table(folder)
    req = request.make(str(folder.resolve()), device=device, variant=ex["variant"], bench=True, timeout=timeout)
    try:
        result, error = isolate.run(req, on_event), None
    except UsageError:
        raise
    except KplayError as e:
        result, error = {"exit_code": e.exit_code}, e
    return record(result, ex, name or student(folder), error)


def kind(case: str, message: str) -> str:
    """A failing case's kind, for the board: what a student did wrong, in two words. The message is the case's
    first line: the check's diagnosis, where it has one (check.REUSED, check.LATE), else the first mismatch."""
    if case.endswith(" reused") and "a result kept from an earlier call" in message:
        return "stale result"
    if "was changed by the kernel" in message:
        return "input changed"
    if "has shape" in message or "outputs, expected" in message:
        return "wrong shape"
    if "got " in message and "expected" in message or "still running on another stream" in message:
        return "wrong value"
    return "other"


def record(result: dict, ex: dict, name: str, error: KplayError | None = None) -> dict:
    """`kplay check --json`: who, what, cases passed of checked, failures by kind, speedup, and the run."""
    rec = {"student": name, "family": ex["family"], "variant": ex["variant"], "passed": 0, "checked": 0,
           "failures": {}, "speedup": None, "baseline": None, "exit_code": result["exit_code"]}
    if error is not None:
        what = "build" if isinstance(error, BuildError) else "timeout" if "timeout" in str(error).lower() else "crash"
        return {**rec, "failures": {what: 1}, "error": str(error), "details": list(getattr(error, "details", [])),
                "run": result}
    v = result["variants"][0]
    check = v["check"]
    failed = check.get("failed", {}) or ({"": "; ".join(check["mismatches"])} if not check["ok"] else {})
    for case, message in failed.items():
        rec["failures"][kind(case, message)] = rec["failures"].get(kind(case, message), 0) + 1
    rec.update(passed=len(check["cases"]) - len(failed), checked=len(check["cases"]))
    if check["ok"] and v.get("speedups"):
        rec["baseline"] = next(iter(v["speedups"]))
        rec["speedup"] = v.get("speedup")
        rec["speedup_noise"] = v["speedups"][rec["baseline"]]["call"]["noise"]
    return {**rec, "run": result}


def score(rec: dict) -> str:
    """The one line: "7/10 cases passed", or "all 10 cases passed · 1.07× torch.sum"."""
    if rec.get("error"):
        return f"0 cases checked: {next(iter(rec['failures']))} failed"
    if rec["passed"] < rec["checked"]:
        kinds = ", ".join(f"{n} {k}" for k, n in rec["failures"].items())
        return f"{rec['passed']}/{rec['checked']} cases passed ({kinds})"
    line = f"all {rec['checked']} cases passed"
    return line + (f" · {rec['speedup']:.2f}× {rec['baseline']}" if rec["speedup"] else "")
