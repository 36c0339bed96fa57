"""Exercises: an exercise's starter written to a student's folder, the folder graded, hints shown in turn.

The starter is made from the solution's `// kplay:todo` regions (markers.py).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import asdict
from pathlib import Path

from ..core.errors import CHECK_FAILED, BuildError, KplayError, UsageError
from ..core.record import CHANGED
from ..family import registry, render
from .folder import HINTS_FILE, student, table
from .todos import Hint, starter_files


def is_exercise(fam: registry.Family) -> bool:
    """A built-in family marked `exercise = true`: show and eject give the starter."""
    return fam.exercise is True


def exercises(fam: registry.Family) -> list[str]:
    """The names of the variants a student can start: those with // kplay:todo regions."""
    if not is_exercise(fam):
        return []
    return [v.name for v in fam.variants.values() if hints_of(fam, v, fam.parse_params([]))]


def starter_sources(fam: registry.Family, variant: registry.Variant, params: dict) -> dict[str, str]:
    """The variant's rendered sources as the starter has them (for `kplay show`)."""
    return starter_files(render.sources(fam, variant, params), fam.path)[0]


def pick(fam: registry.Family, variant: str | None, gpu: bool) -> registry.Variant:
    """The variant to start: by name, else the family's default if it is an exercise that runs here, else the
    first exercise of this machine's device (a GPU's, where there is one), else the first that runs here."""
    if variant:
        return fam.variant(variant)
    marked = [v for v in fam.variants.values() if hints_of(fam, v, fam.parse_params([]))]
    if not marked:
        raise UsageError(f"{fam.name} has no // kplay:todo regions: nothing to start")
    runs = [v for v in marked if gpu or v.device != "cuda"]
    if not runs:
        names = ", ".join(f"{fam.name}/{v.name}" for v in marked)
        raise UsageError(f"{fam.name}'s exercises need a GPU ({names}) and none is visible here")
    default = fam.variants.get(fam.default_variant)
    if default in runs:
        return default
    return sorted(runs, key=lambda v: v.device != ("cuda" if gpu else "cpu"))[0]


def hints_of(fam, variant, params) -> list[Hint]:
    """A variant's hints, from its sources and the headers they include, numbered in that order."""
    files = {**render.sources(fam, variant, params), **{n: render.header(fam, variant, n) for n in variant.includes}}
    return starter_files(files, fam.path)[1]


def start(fam: registry.Family, variant: registry.Variant, folder: Path, params: dict, force: bool = False,
          name: str | None = None) -> list[Path]:
    """Write the starter of one variant into folder, after building it once (a marking that breaks the build is
    refused). The folder's exercise record names its student (`name`, else $KPLAY_STUDENT) and this start's id."""
    from .scaffold import eject

    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())) and not force:
        raise UsageError(f"{folder} is not empty: a student's files are never overwritten (use --force)")
    hints = hints_of(fam, variant, params)
    if not hints:
        raise UsageError(f"{fam.name}/{variant.name} has no // kplay:todo regions: nothing to start")
    who = (name or os.environ.get("KPLAY_STUDENT", "")).strip()
    table = {"family": fam.name, "variant": variant.name, **({"student": who} if who else {}),
             "id": uuid.uuid4().hex[:6], "hints": [{k: v for k, v in asdict(h).items() if k != "code" or v} for h in hints]}
    with tempfile.TemporaryDirectory(prefix="kplay-starter-") as tmp:
        eject(fam, Path(tmp), [variant], params, starter=True, exercise=table)
        _compiles(registry.load_family(Path(tmp)), variant, params, f"{fam.name}/{variant.name}", tmp)
    (folder / HINTS_FILE).unlink(missing_ok=True)  # a fresh start: no hint seen yet
    return eject(fam, folder, [variant], params, force=True, starter=True, exercise=table)


def _compiles(starter: registry.Family, variant: registry.Variant, params: dict, what: str, where: str) -> None:
    """Build the starter here (CUDA compiles and links without a GPU); a failure is the marking's fault."""
    import logging

    from ..compiler.build import build
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found" on CPU boxes
    try:
        build(starter, starter.variants[variant.name], params)
    except BuildError as e:
        first = next((d.strip() for d in e.details if "error" in d), str(e)).replace(where + "/", "")
        raise UsageError(f"the starter of {what} does not compile (fix the marking or add a // kplay:stub); "
                         f"at the starter's line {first}") from None


def graded(fam: registry.Family, variant: registry.Variant) -> list[str]:
    """The dtypes `check` grades: every one a variant declares (its own `dtypes`), else the family's
    `grade_dtypes` (default: all of its dtypes); its first dtype first (that one's time ranks)."""
    takes = fam.dtypes_of(variant)
    chosen = variant.dtypes or [d for d in fam.grade_dtypes or fam.dtypes if d in takes]
    return sorted(chosen, key=lambda d: d != takes[0])


def grade(folder: Path, device: str, name: str | None, on_event, timeout: float = 120.0, sanitize: bool = True,
          seed: int | None = None) -> dict:
    """Run the folder's variant through the child (`kplay run`'s path) at every graded dtype, timed at the first,
    and score it; a build error, a crash or a timeout is that dtype's one failed case. A CUDA kernel that passed
    is then run under memcheck and racecheck (`sanitize`), each one more case. With no seed, a fresh one: the
    drawn sizes and data are then nothing a kernel can know; the record keeps it (--seed grades the same)."""
    import secrets

    from ..child import spawn as isolate
    from ..family import request

    ex, fam = table(folder), registry.load_family(folder)
    seed = secrets.randbelow(1 << 31) if seed is None else seed
    parts = []
    for k, dtype in enumerate(graded(fam, fam.variant(ex["variant"]))):
        req = request.make(str(folder.resolve()), device=device, variant=ex["variant"], dtype=dtype, bench=k == 0,
                           timeout=timeout, one_baseline=True, seed=seed)  # one baseline: not lltm's torch.compile too
        try:
            parts.append(_part(dtype, isolate.run(req, on_event)))
        except UsageError:
            raise
        except KplayError as e:
            parts.append(_fatal(dtype, e, timeout))
            if parts[-1]["failures"].keys() & {"build", "timeout"}:
                break  # the same source fails to build at every dtype; a hang costs its timeout once
    rec = record(parts, ex, name or student(folder)) | {"seed": seed}
    if sanitize and rec["passed"] == rec["checked"] and rec["run"].get("device") == "cuda":
        rec = with_sanitizers(rec, _sanitized(folder, ex, fam, parts[0]["dtype"], on_event, timeout))
    return rec


SANITIZERS = {"memcheck": "out of bounds", "racecheck": "race"}  # the tools check runs, and a finding's kind


def _sanitized(folder: Path, ex: dict, fam: registry.Family, dtype: str, on_event, timeout: float) -> list[dict]:
    """memcheck and racecheck side by side, on the family's small sanitize_sizes (racecheck of a large size takes
    minutes): a case each, failed by a finding in the student's kernels; [] where compute-sanitizer is missing."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from ..compiler.toolchain import cuda_tool
    from ..family import request

    if not cuda_tool("compute-sanitizer"):
        return []
    sizes = fam.sanitize_sizes or fam.test_sizes or ({},)
    req = request.make(str(folder.resolve()), device="cuda", variant=ex["variant"], dtype=dtype, bench=False,
                       sizes={k: str(v) for k, v in sizes[-1].items()}, timeout=timeout, lineinfo=True)
    req = dataclasses.replace(req, test_sizes=tuple(sizes[:-1]))
    with ThreadPoolExecutor(len(SANITIZERS)) as pool:
        return list(pool.map(lambda tool: _under(req, tool, on_event), SANITIZERS))


def _under(req, tool: str, on_event) -> dict:
    """One tool's run, as a case: passed when it found nothing in the student's kernels."""
    from ..insight import sanitize

    try:
        found = sanitize.run(req, tool, on_event)["sanitize"]
    except KplayError as e:
        return {"tool": tool, "passed": 0, "checked": 1, "failures": {"crash": 1}, "exit_code": e.exit_code,
                "what": f"{tool}: {str(e).split(': ')[0]}", "sanitize": None}
    bad = bool(found["findings"])
    return {"tool": tool, "passed": int(not bad), "checked": 1, "failures": {SANITIZERS[tool]: 1} if bad else {},
            "exit_code": CHECK_FAILED if bad else 0, "sanitize": found}


def with_sanitizers(rec: dict, tools: list[dict]) -> dict:
    """The record with the sanitizers' cases added (or a note that none ran); a finding takes the rank away."""
    if not tools:
        return {**rec, "sanitized": [], "sanitizer_note": "memcheck and racecheck not run: compute-sanitizer not "
                                                           "found (pip install nvidia-cuda-sanitizer-api)"}
    failures = dict(rec["failures"])
    for t in tools:
        for k, n in t["failures"].items():
            failures[k] = failures.get(k, 0) + n
    rec = {**rec, "passed": rec["passed"] + sum(t["passed"] for t in tools), "failures": failures,
           "checked": rec["checked"] + len(tools), "sanitized": tools,
           "exit_code": rec["exit_code"] or next((t["exit_code"] for t in tools if t["exit_code"]), 0)}
    if rec["passed"] < rec["checked"]:
        rec.update(speedup=None, baseline=None, speedup_noise=None, speedup_same=None)
    ended = next((t["what"] for t in tools if t.get("what")), None)  # a tool that could not finish its run
    return {**rec, "what": rec.get("what") or ended} if ended else rec


def kind(case: str, message: str) -> str:
    """A failing case's kind, for the board: what a student did wrong, in two words. The message is the case's
    first line: the check's diagnosis, where it has one (check.REUSED, check.LATE), else the first mismatch."""
    if case.endswith(" reused") and "a result kept from an earlier call" in message:
        return "stale result"
    if CHANGED in message:
        return "input changed"
    if "has shape" in message or "outputs, expected" in message:
        return "wrong shape"
    if "got " in message and "expected" in message or "still running on another stream" in message \
            or "printed " in message and "expected" in message:
        return "wrong value"
    return "other"


def _part(dtype: str, result: dict) -> dict:
    """One dtype's run: its cases passed of checked and its failures by kind."""
    check = result["variants"][0]["check"]
    failed = check.get("failed", {}) or ({"": "; ".join(check["mismatches"])} if not check["ok"] else {})
    failures: dict[str, int] = {}
    for case, message in failed.items():
        failures[kind(case, message)] = failures.get(kind(case, message), 0) + 1
    return {"dtype": dtype, "passed": len(check["cases"]) - len(failed), "checked": len(check["cases"]),
            "failures": failures, "exit_code": result["exit_code"], "run": result}


def _fatal(dtype: str, error: KplayError, timeout: float) -> dict:
    """A dtype whose run ended early: one failed case, and what happened in a few words."""
    text = str(error)
    if isinstance(error, BuildError):
        what, key = "build error", "build"
    elif text.startswith("timed out"):
        what, key = text.split(":")[0].replace("timed out", f"timed out after {timeout:g} s", 1), "timeout"
    elif "wrote to its input" in text:
        what, key = text.split(":")[0].removeprefix("the kernel "), "input changed"
    else:
        what, key = "crashed: " + text.removeprefix("kernel crashed: ").split(": ")[0], "crash"
    return {"dtype": dtype, "passed": 0, "checked": 1, "failures": {key: 1}, "exit_code": error.exit_code,
            "what": what, "error": text, "details": list(getattr(error, "details", []))}


def record(parts: list[dict], ex: dict, name: str) -> dict:
    """`kplay check --json`: who, what, cases passed of checked over every graded dtype, failures by kind, the
    speedup at the first dtype (only when every case passed: no wrong kernel ranks), and each dtype's part."""
    failures: dict[str, int] = {}
    for p in parts:
        for k, n in p["failures"].items():
            failures[k] = failures.get(k, 0) + n
    first = parts[0]
    rec = {"student": name, "family": ex["family"], "variant": ex["variant"],
           "passed": sum(p["passed"] for p in parts), "checked": sum(p["checked"] for p in parts),
           "failures": failures, "speedup": None, "baseline": None,
           "exit_code": next((p["exit_code"] for p in parts if p["exit_code"]), 0),
           "dtypes": [{k: v for k, v in p.items() if k != "run" or p is not first} for p in parts],
           "run": first.get("run", {"exit_code": first["exit_code"]})}
    fatal = next((p for p in parts if "what" in p), None)
    if fatal:
        at = "" if "build" in fatal["failures"] else f" ({fatal['dtype']})"  # a build fails at every dtype
        rec.update(error=fatal["error"], details=fatal["details"], what=fatal["what"] + at)
    v = first.get("run", {}).get("variants", [{}])[0]
    if rec["passed"] == rec["checked"] and not fatal and v.get("speedups"):
        rec["baseline"] = next(iter(v["speedups"]))
        rec["speedup"] = v.get("speedup")
        rec["speedup_noise"] = v["speedups"][rec["baseline"]]["call"]["noise"]
        rec["speedup_same"] = v["speedups"][rec["baseline"]]["call"]["same"]  # within the noise: the table's "same"
    return rec


def score(rec: dict) -> str:
    """The one line: "7/10 cases passed (3 wrong value)", "all 10 cases passed · 1.07× torch.sum" ("· same as
    torch.sum (0.97×)" within the noise, as the table says), or what ended the run: "build error", "crashed:
    segmentation fault while checking cpp at n=1 randn (float64)"."""
    if rec["passed"] < rec["checked"]:
        ran = {k: n for k, n in rec["failures"].items() if k not in ("build", "crash", "timeout")}
        kinds = ", ".join(f"{n} {k}" for k, n in ran.items())
        cases = f"{rec['passed']}/{rec['checked']} cases passed" + (f" ({kinds})" if kinds else "")
        return "; ".join(filter(None, [cases if rec["passed"] or kinds else "", rec.get("what", "")]))
    line = f"all {rec['checked']} cases passed"
    if not rec["speedup"]:
        return line
    if rec.get("speedup_same"):
        return f"{line} · same as {rec['baseline']} ({rec['speedup']:.2f}×, within the noise)"
    return f"{line} · {rec['speedup']:.2f}× {rec['baseline']}"
