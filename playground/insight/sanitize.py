"""`kplay run --sanitize TOOL`: the check under compute-sanitizer, its findings at the student's file and line.

The child runs under the tool with PyTorch's caching allocator off (it hides reads past an allocation's
end and memory reused between tensors). The tool's text is parsed (its XML holds no findings when there
are none, and was never seen with some), and only the findings in the variant's own kernels count.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..core import events
from ..core.errors import CHECK_FAILED, KernelCrash, UsageError
from ..core.names import short_name
from ..family.render import in_sources

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
PREFIX = "========="
SHOWN = 3  # findings shown; the rest are counted, and the log has them all
PRINT_LIMIT = 100  # reports the tool prints in full (its summary still counts them all)
TORCH = ("at::", "c10::", "torch::")  # PyTorch's own kernels: not the student's to fix
# "at void k<float>(const T1 *, long)+0x390 in /cache/kplay_sum_tree_1a2b/cuda.cu:23 [124 hazards]"
AT = re.compile(r"\bat (?P<where>.+?)(?: in (?P<file>\S+):(?P<line>\d+))?(?: \[(?P<hazards>\d+) hazards?\])?\s*$")
RACE = re.compile(r"Race reported between (?P<a>\w+) access")
AND = re.compile(r"^and (?P<b>\w+) access")
SUMMARY = re.compile(r"(?:ERROR|RACECHECK) SUMMARY: (?P<text>.*)")


@dataclass(frozen=True)
class Finding:
    what: str  # "Invalid __global__ read of size 4 bytes", "race between read and write"
    kernel: str  # sum_tree_kernel<float>
    file: str | None  # where the build's -lineinfo puts it (None without -lineinfo)
    line: int | None
    count: int  # hazards (racecheck) or 1
    offset: str = ""  # "+0x390": tells places apart where there is no line
    pytorchs: bool = False  # in one of PyTorch's own kernels (at::, c10::, torch::)


def tool_name(tool: str) -> str:
    """An unknown tool is a usage error naming the four."""
    if tool not in TOOLS:
        raise UsageError(f"--sanitize {tool}: valid: {', '.join(TOOLS)}")
    return tool


def executable() -> str:
    from ..compiler.toolchain import cuda_tool

    found = cuda_tool("compute-sanitizer")
    if not found:
        raise UsageError("compute-sanitizer not found: pip install nvidia-cuda-sanitizer-api")
    return found


def short_kernel(where: str) -> str:
    """'void sum_tree_kernel<float>(const T1 *, long, T1 *)+0x390' -> 'sum_tree_kernel<float>'."""
    return short_name(re.sub(r"[+:]0x[0-9a-f]+$", "", where.strip()))


def _body(line: str) -> str | None:
    """A line of the tool's own output, less its prefix (None for the program's own lines)."""
    return line[len(PREFIX):] if line.startswith(PREFIX) else None


def parse(text: str) -> list[Finding]:
    """Every report in compute-sanitizer's text: memcheck, initcheck and synccheck errors, racecheck hazards."""
    found, head, race = [], None, None
    for raw in text.splitlines():
        body = _body(raw)
        if body is None:  # the program's own output
            continue
        line = body.strip()
        if not line:  # the blank line between reports
            head = race = None
        elif not body.startswith("  "):  # a report's first line
            m = RACE.search(line)
            head, race = (None, m["a"].lower()) if m else (line, None)
            if m:
                found.append(_finding("race", AT.search(line)))
        elif race and (m := AND.match(line)):  # racecheck's other access, with the hazard count
            at = AT.search(line)
            hazards = int(at["hazards"]) if at and at["hazards"] else 1
            found[-1] = dataclasses.replace(found[-1], what=f"race between {race} and {m['b'].lower()}",
                                            count=max(found[-1].count, hazards))
        elif head and line.startswith("at ") and (at := AT.search(line)):
            found.append(_finding(head, at))
            head = None  # what follows (thread, address, frames) belongs to the same report
    return found


def _finding(what: str, at: re.Match | None) -> Finding:
    if at is None:
        return Finding(what, "?", None, None, 1)
    offset = re.search(r"[+:]0x[0-9a-f]+$", at["where"])
    name = at["where"].strip().removeprefix("void ")
    return Finding(what, short_kernel(at["where"]), at["file"], int(at["line"]) if at["line"] else None,
                   int(at["hazards"]) if at["hazards"] else 1, offset[0] if offset else "", name.startswith(TORCH))


def summary(text: str) -> str:
    """The tool's own count: '257 errors', '20 hazards displayed (0 errors, 85 warnings)'."""
    lines = [m["text"].strip() for m in map(SUMMARY.search, text.splitlines()) if m]
    return lines[0] if lines else ""


def tool_errors(text: str) -> list[str]:
    """The tool's own error lines ('Error: Target application terminated before first instrumented API call')."""
    return [f"compute-sanitizer: {b.strip()}" for b in map(_body, text.splitlines())
            if b and b.strip().startswith("Error:") and "Race reported" not in b]


def ours(findings: list[Finding]) -> list[Finding]:
    """The findings in the variant's kernels, not in PyTorch's (a fault there is a knock-on of ours)."""
    return [f for f in findings if not f.pytorchs]


def grouped(findings: list[Finding]) -> list[tuple[Finding, int]]:
    """One entry per (what, kernel, place), with the hazards or errors added up, most first."""
    counts = Counter()
    first = {}
    for f in findings:
        key = (f.what, f.kernel, f.file, f.line) if f.file else (f.what, f.kernel, f.offset)
        counts[key] += f.count
        first.setdefault(key, f)
    return [(first[k], n) for k, n in counts.most_common()]


def student_place(f: Finding, fam, variants: list) -> str:
    """'/cache/kplay_sum_tree_1a2b/cuda.cu:23' -> 'snippets/sum/sum_tree.cu:23' (a header keeps its path).

    The build folder's name tells the variant: kplay_<family>_<variant>_<hash>.
    """
    if f.file is None:
        return f"offset {f.offset} (no -lineinfo)"
    folder = Path(f.file).parent.name
    named = sorted(variants, key=lambda v: -len(v.name))  # the longest first: tree_past_end before tree
    variant = next((v for v in named if folder.startswith(re.sub(r"\W", "_", f"kplay_{fam.name}_{v.name}_").lower())),
                   variants[0])
    return in_sources(f"{f.file}:{f.line}", fam, variant)


def record(tool: str, text: str, fam, variants: list, log: str) -> dict:
    """What --json shows: the tool, its summary, the variant's findings grouped and placed."""
    rows = [{"what": f.what, "kernel": f.kernel, "at": student_place(f, fam, variants), "count": n,
             "unit": "hazards" if f.what.startswith("race") else "errors"} for f, n in grouped(ours(parse(text)))]
    return {"tool": tool, "summary": summary(text), "findings": rows, "log": log}


def _under(req, argv: list[str], log: Path, on_event) -> tuple[dict | None, KernelCrash | None, str]:
    """The run under the tool: its result (None if it crashed), the crash, and the tool's log (kept at `log`).
    The tool writes to a folder of this run's, which the sandbox binds in (its /tmp is its own)."""
    from ..child import spawn as isolate

    log.parent.mkdir(parents=True, exist_ok=True)
    result, crash = None, None
    with tempfile.TemporaryDirectory(prefix="kplay-tool-") as tmp:
        own = Path(tmp) / log.name
        try:
            result = isolate.run(req, on_event, under=[*argv, "--log-file", str(own)],
                                 env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, writable=(tmp,))
        except KernelCrash as e:  # memcheck's finding may end the kernel: "unspecified launch failure"
            crash = e
        text = own.read_text(errors="replace") if own.exists() else ""
        if own.exists():  # kept under the name the report gives: copied beside it, then renamed (atomic)
            beside = log.with_name(f"{log.name}.{os.getpid()}")
            shutil.copyfile(own, beside)
            os.replace(beside, log)
        else:
            log.unlink(missing_ok=True)
    return result, crash, text


def run(req, tool: str, on_event=events.ignore) -> dict:
    """The run's result under the tool, with result['sanitize']; any finding fails it (exit 1). Its check takes
    the family's small sanitize sizes before the requested size, as `kplay check` does, not the test sizes: a
    racecheck of a 1000 x 1000 x 1023 matmul through shared memory takes minutes."""
    from ..compiler.toolchain import cache_dir

    fam = req.load_family()
    if req.test_sizes is None and fam.sanitize_sizes:
        req = dataclasses.replace(req, test_sizes=fam.sanitize_sizes)

    # application-only: the worker is the application; its builds (ninja, nvcc) are left alone
    argv = [executable(), "--tool", tool, "--target-processes", "application-only", "--print-limit", str(PRINT_LIMIT),
            "--show-backtrace", "device"]
    log = cache_dir() / "sanitize" / f"{req.family}-{req.dtype}-{tool}.log"  # a run per dtype: a log each
    result, crash, text = _under(req, argv, log, on_event)
    if not crash and not summary(text):  # no summary, no verdict: "clean" would be a guess
        crash = KernelCrash(f"no summary (its log {'empty' if text else 'not written'}), so not called clean")
        crash.details = tool_errors(text)
        raise crash
    found = record(tool, text, fam, fam.pick_variants("cuda", req.variant), str(log))
    if crash and not found["findings"]:  # the tool's own complaint, if it had one (no driver, no device)
        crash.details = [*getattr(crash, "details", []), *tool_errors(text)]
        raise crash
    result = result or {"family": fam.name, "ok": False, "exit_code": CHECK_FAILED}
    result["sanitize"] = {**found, "crash": str(crash) if crash else None}
    if found["findings"]:  # a failed check, even where the numbers were right
        matched = result["ok"]
        result["ok"], result["exit_code"] = False, CHECK_FAILED
        places = len(found["findings"])
        result["why"] = (f"{tool} found problems at {places} place{'s' * (places > 1)} in the kernel"
                         + ("" if matched else "; the output does not match the reference either"))
    return result


def report(r: dict, verbose: bool = False):
    """The tool's lines under the run's table: what it found, where, how many; the log's path."""
    from rich.console import Group
    from rich.text import Text

    s = r["sanitize"]
    lines = []
    if s["crash"]:
        lines.append(Text(f"the run ended: {s['crash']}", style="red"))
    for f in s["findings"][:SHOWN]:
        placed = re.match(r"^(.*):(\d+)$", f["at"])  # the file's name is enough here; --json has the path
        place = f"{Path(placed[1]).name}:{placed[2]}" if placed else f["at"]
        lines.append(Text(f"{s['tool']}: {f['count']:,} {f['unit']} in {f['kernel']} at {place}", style="red"))
        lines.append(Text(f"  {f['what']}", style="dim"))
    more = len(s["findings"]) - SHOWN
    if more > 0:
        lines.append(Text(f"... and {more} more place{'s' * (more > 1)} (--verbose, or the log)"))
    verdict = f"{s['tool']}: FAIL" if s["findings"] else f"{s['tool']}: clean"
    said = f"; its summary: {s['summary']}" if s["summary"] else ""
    lines.append(Text(verdict + said, style="red" if s["findings"] else "green"))
    if verbose and s["log"] and Path(s["log"]).exists():
        lines.append(Text(Path(s["log"]).read_text(errors="replace")))
    else:
        lines.append(Text(f"full output: {s['log']}", style="dim"))
    return Group(*lines)
