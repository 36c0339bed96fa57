"""The class board: `kplay check --json` records, one per student, ranked; a table, board.csv and board.html.

Ranked within each exercise (family/variant) by cases passed, then by speedup over the reference. The page is
one file with nothing to fetch: inline CSS and an inline SVG chart, so it opens from a USB stick or a mail.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..core.errors import UsageError
from ..core.record import Stats, same

# The fields the board reads, and their JSON types; "student" is optional (the file's stem stands in).
NEEDED = {"family": str, "variant": str, "passed": int, "checked": int, "failures": dict, "exit_code": int}
# exercise.kind's kinds, then exercise.record's: no case ran at all.
KINDS = ("wrong value", "wrong shape", "input changed", "stale result", "race", "out of bounds", "other", "build",
         "crash", "timeout")
FATAL = {"build": "build error", "crash": "crashed", "timeout": "timed out"}
CSV_NAME, HTML_NAME = "board.csv", "board.html"
CSV_HEAD = ["exercise", "rank", "student", "passed", "checked", "speedup", "baseline", "exit_code"]
GENERATOR = '<meta name="generator" content="kplay board">'  # marks board.html as kplay's: rewriting it is fine
BAR = 10  # cells of the terminal's cases bar


@dataclass(frozen=True)
class Entry:
    """One student's record, as the board shows it."""

    student: str
    exercise: str  # family/variant
    passed: int
    checked: int
    failures: dict[str, int]
    speedup: float | None
    baseline: str | None
    exit_code: int
    file: str
    noise: float = 0.0  # the speedup's relative noise
    what: str = ""  # what ended a run early: "crashed: segmentation fault while checking cpp at n=1"

    @property
    def complete(self) -> bool:
        return self.checked > 0 and self.passed == self.checked

    @property
    def said(self) -> str:
        """The failures column: each kind's count, then what ended a run early, in the check's own words."""
        ran = failure_text({k: n for k, n in self.failures.items() if k not in FATAL})
        ended = self.what or failure_text({k: n for k, n in self.failures.items() if k in FATAL})
        return "; ".join(filter(None, [ran, ended]))


@dataclass(frozen=True)
class Ranked:
    """One exercise's entries, best first, with their ranks (ties share one: 1, 1, 3)."""

    exercise: str
    rows: list[tuple[int, Entry]]

    @property
    def baseline(self) -> str | None:
        return next((e.baseline for _, e in self.rows if e.baseline), None)

    @property
    def timed(self) -> bool:
        return any(e.speedup is not None for _, e in self.rows)


# ---- reading the records ----------------------------------------------------------------------------------

def load(paths: list[str]) -> tuple[list[Entry], list[str]]:
    """Every record's entry, and a warning for each file skipped: one that is not a check record (empty, or
    another tool's), or an older record of a student already on that exercise. A path that is not there is an
    error (a typo); a class is never refused for one student's file."""
    if not paths:
        raise UsageError("kplay board needs RESULTS files: each the output of kplay check --json")
    entries: dict[tuple[str, str], Entry] = {}
    skipped, twice, files = [], [], set()
    for path in map(Path, paths):
        if path.resolve() in files:  # the same file twice (`*.json ada.json`): once
            continue
        files.add(path.resolve())
        try:
            e = read(path)
        except Unreadable as bad:
            skipped.append(str(bad))
            continue
        other = entries.get((e.student, e.exercise))
        if other is not None:
            old, new = sorted([other, e], key=lambda x: Path(x.file).stat().st_mtime)
            twice.append(f"{old.file} and {new.file} are both {e.student} on {e.exercise}: "
                         f"kept {new.file}, the newer")
            e = new
        entries[(e.student, e.exercise)] = e
    if not entries:
        many = "s" * (len(files) != 1)
        raise UsageError(f"no check record among the {len(files)} file{many}: " + "; ".join(skipped))
    return list(entries.values()), [f"skipped {w}" for w in skipped] + twice


class Unreadable(UsageError):
    """A file that is there but is no check record: the board skips it."""


def read(path: Path) -> Entry:
    """One `kplay check --json` file as an Entry."""
    if not path.exists():
        glob = " (a pattern that matched no files)" if any(c in str(path) for c in "*?[") else ""
        raise UsageError(f"{path}: no such file{glob}")
    if path.is_dir():
        raise UsageError(f"{path} is a folder: give the files in it, e.g. {path / '*.json'}")
    try:  # bytes: json finds UTF-16 itself (PowerShell's `>` writes it); a UTF-8 BOM is dropped
        data = json.loads(path.read_bytes().removeprefix(b"\xef\xbb\xbf"))
    except UnicodeDecodeError:
        raise Unreadable(f"{path}: not JSON (not even text); expected the output of kplay check --json") from None
    except json.JSONDecodeError as e:
        if not path.read_bytes().strip():
            raise Unreadable(f"{path}: empty (a check that printed nothing)") from None
        raise Unreadable(f"{path}: not JSON ({e.msg} at line {e.lineno}); expected the output of kplay check --json") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read it ({e.strerror})") from None
    return entry(data, path)


def entry(data, path: Path) -> Entry:
    """A parsed record as an Entry, after checking it has the fields a check record has."""
    if not isinstance(data, dict):
        raise Unreadable(f"{path}: not a kplay check --json record (a JSON {type(data).__name__}, not an object)")
    missing = [k for k in NEEDED if k not in data]
    if missing:
        raise Unreadable(f"{path}: not a kplay check --json record (no {', '.join(missing)})")
    wrong = [k for k, t in NEEDED.items() if not isinstance(data[k], t) or isinstance(data[k], bool)]
    failures = data["failures"]
    if "failures" not in wrong and not all(isinstance(n, int) and not isinstance(n, bool) for n in failures.values()):
        wrong.append("failures")
    speedup = data.get("speedup")
    if speedup is not None and (not isinstance(speedup, (int, float)) or isinstance(speedup, bool) or speedup <= 0):
        wrong.append("speedup")
    if not {"passed", "checked"} & set(wrong) and not 0 <= data["passed"] <= data["checked"]:
        wrong.append("passed")
    if wrong:
        raise Unreadable(f"{path}: not a kplay check --json record ({', '.join(wrong)} of the wrong type)")
    if not data["family"]:
        raise Unreadable(f"{path}: no exercise ran: {data.get('error', 'a record without its family')}")
    name = data.get("student")
    return Entry(student=name.strip() if isinstance(name, str) and name.strip() else path.stem,
                 exercise=f"{data['family']}/{data['variant']}", passed=data["passed"], checked=data["checked"],
                 failures=dict(failures), speedup=None if speedup is None else float(speedup),
                 baseline=data.get("baseline") if isinstance(data.get("baseline"), str) else None,
                 exit_code=data["exit_code"], file=str(path), noise=_noise(data.get("speedup_noise")),
                 what=data["what"] if isinstance(data.get("what"), str) else "")


def rank(entries: list[Entry]) -> list[Ranked]:
    """One Ranked per exercise (by name): most cases passed first, then the fastest, then by name; ties (the
    same cases, speedups the same within the noise) share a rank."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.exercise, []).append(e)
    out = []
    for exercise in sorted(groups):
        best = sorted(groups[exercise], key=lambda e: (-e.passed, -(e.speedup or 0.0), e.student.lower()))
        rows, leader = [], None
        for k, e in enumerate(best, 1):
            tied = leader is not None and _tied(leader, e)
            rows.append((rows[-1][0] if tied else k, e))
            leader = leader if tied else e
        out.append(Ranked(exercise, rows))
    return out


def _tied(a: Entry, b: Entry) -> bool:
    """The same cases passed, and speedups the same within their noise (record.same: the rule `kplay run` uses)."""
    if a.passed != b.passed or (a.speedup is None) != (b.speedup is None):
        return False
    if a.speedup is None:
        return True
    speed = lambda e: Stats(e.speedup, e.speedup, e.speedup, 1, "speedup", noise=e.noise)
    return same(speed(a), speed(b)) or a.speedup == b.speedup


def _noise(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0.0


def failure_text(failures: dict[str, int]) -> str:
    """'6 wrong value, 1 stale result'; a failure before any case ran is named alone ('build error')."""
    kinds = sorted(failures, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS))
    return ", ".join(FATAL[k] if k in FATAL else f"{failures[k]} {k}" for k in kinds if failures[k])


def common_failures(groups: list[Ranked]) -> list[tuple[str, int]]:
    """Each failure kind (as the table names it) and how many students hit it, most first."""
    count: dict[str, int] = {}
    for g in groups:
        for _, e in g.rows:
            for k in (k for k, n in e.failures.items() if n):
                count[k] = count.get(k, 0) + 1
    order = sorted(count, key=lambda k: (-count[k], KINDS.index(k) if k in KINDS else len(KINDS), k))
    return [(FATAL.get(k, k), count[k]) for k in order]


# ---- the terminal's table ---------------------------------------------------------------------------------

def table(groups: list[Ranked]) -> Group:
    """Per exercise: its title line, then one row per student, best first; the class's failures last."""
    parts: list = []
    for g in groups:
        parts += [_title(g), _group_table(g), Text("")]
    common = common_failures(groups)
    students = sum(len(g.rows) for g in groups)
    if common:
        said = ", ".join(f"{kind} {n}" for kind, n in common)
        parts.append(Text(f"students with each failure: {said} (of {students})", style="dim"))
    parts.append(Text("ranked by cases passed, then by speedup; ties (within the noise) share a rank", style="dim"))
    return Group(*parts)


def _title(g: Ranked) -> Text:
    done = sum(e.complete for _, e in g.rows)
    n = len(g.rows)
    return Text(g.exercise, style="bold") + Text(f" · {n} student{'s' * (n != 1)} · {done} passed every case")


def _group_table(g: Ranked) -> Table:
    t = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("student", overflow="fold", max_width=24)
    t.add_column("cases passed", no_wrap=True)
    if g.timed:
        t.add_column(f"×{g.baseline}" if g.baseline else "speedup", justify="right", no_wrap=True)
    t.add_column("failures", overflow="fold")
    for k, e in g.rows:
        speed = [f"{e.speedup:.2f}×" if e.speedup is not None else "-"] if g.timed else []
        t.add_row(str(k), Text(e.student), _cases(e), *speed, Text(e.said))  # names are not markup
    return t


def _cases(e: Entry) -> Text:
    """'██████░░░░  6/10', green when every case passed, red when none did."""
    filled = round(BAR * e.passed / e.checked) if e.checked else 0
    style = "green" if e.complete else "red" if e.passed == 0 else "yellow"
    return Text("█" * filled, style=style) + Text("░" * (BAR - filled), style="dim") + Text(f" {e.passed:>2}/{e.checked}")


# ---- the files: board.csv and board.html ------------------------------------------------------------------

def targets(out: Path) -> tuple[Path, Path]:
    """board.csv and board.html in out, refused before anything is written if either is a file kplay did not write."""
    existing = next(p for p in (out, *out.parents) if p.exists())  # out is made if missing: not inside a file
    if not existing.is_dir():
        raise UsageError(f"--out {out}: {'it' if existing == out else existing} is not a folder")
    found = out / CSV_NAME, out / HTML_NAME
    for path in found:
        if path.exists() and not ours(path):
            raise UsageError(f"{path} exists and is not a board kplay wrote: move it, or choose another --out")
    return found


def ours(path: Path) -> bool:
    """Whether a board.csv / board.html is kplay's own output (its header / its generator tag)."""
    try:
        with path.open("rb") as f:
            head = f.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    if path.name == CSV_NAME:
        return head.startswith(",".join(CSV_HEAD) + ",") or head.startswith(",".join(CSV_HEAD) + "\r")
    return GENERATOR in head


def write(groups: list[Ranked], out: Path, html: str) -> list[Path]:
    """Write board.csv and board.html (the page, board_page.page) into out (made if missing); their paths."""
    csv_path, html_path = targets(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(groups, csv_path)
        html_path.write_text(html, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write there ({e.strerror})") from None
    return [csv_path, html_path]


def csv_rows(groups: list[Ranked]) -> tuple[list[str], list[dict]]:
    """The header (one column per failure kind that occurs) and one row per student."""
    seen = {k for g in groups for _, e in g.rows for k in e.failures}
    kinds = [k for k in KINDS if k in seen] + sorted(seen - set(KINDS))
    rows = []
    for g in groups:
        for k, e in g.rows:
            rows.append({"exercise": e.exercise, "rank": k, "student": e.student, "passed": e.passed,
                         "checked": e.checked, "speedup": "" if e.speedup is None else f"{e.speedup:.4g}",
                         "baseline": e.baseline or "", "exit_code": e.exit_code,
                         **{kind: e.failures.get(kind, 0) for kind in kinds}, "file": e.file})
    return [*CSV_HEAD, *kinds, "file"], rows


def write_csv(groups: list[Ranked], path: Path) -> None:
    header, rows = csv_rows(groups)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)


def _cell(value):
    """A text cell a spreadsheet would run as a formula (`--name "=HYPERLINK(...)"`) is quoted with a '."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value
