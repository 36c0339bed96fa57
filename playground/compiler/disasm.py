"""What the compiler made of a variant, read from its build: PTX, SASS or x86 code grouped under the source
line each instruction came from (Compiler Explorer's view), and which C++ loops were vectorized.

Everything comes from the build's own folder, so it is what runs and a cached build costs nothing:
- PTX and SASS: the build passes nvcc `-lineinfo --keep`, which leaves the PTX and the cubin it made in the
  folder (no second compile, no cuobjdump to pull the cubin out of the library); nvdisasm turns the cubin
  into SASS with `//## File ..., line N` marks. The PTX carries `.loc` directives.
- C++: the build adds `-g1` (line tables only), and `objdump -d -l` reads main.o.
- Vectorization: the compiler's remarks (gcc `-fopt-info-vec`, clang `-Rpass=loop-vectorize`), printed
  during the build and kept beside it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import BuildError, UsageError
from ..core.names import short_name
from .build import build
from .remarks import is_students, loops, student_file
from .toolchain import KEEP, folder

WHEELS = {"nvdisasm": "nvidia-cuda-nvdisasm", "cuobjdump": "nvidia-cuda-cuobjdump"}


@dataclass
class Group:
    """Consecutive instructions from one source line."""

    file: str
    line: int  # 0: the compiler gave no line
    code: list[str] = field(default_factory=list)


@dataclass
class Listing:
    """One compiled function (a kernel, or a C++ function of the student's file)."""

    name: str  # demangled
    symbol: str
    groups: list[Group] = field(default_factory=list)

    def add(self, file: str, line: int, instruction: str) -> None:
        if not self.groups or (self.groups[-1].file, self.groups[-1].line) != (file, line):
            self.groups.append(Group(file, line))
        self.groups[-1].code.append(instruction)


# ---- what the build keeps ------------------------------------------------------------------------------

# ---- file names: the build's copies are the student's files --------------------------------------------

# ---- tools ---------------------------------------------------------------------------------------------

def tool(name: str) -> str:
    """nvdisasm: on PATH, in CUDA's bin folder, or from NVIDIA's pip wheel (toolchain.cuda_tool)."""
    from . import toolchain

    found = toolchain.cuda_tool(name)
    if not found:
        raise UsageError(f"{name} not found: pip install {WHEELS[name]} (or kplay[insight]); "
                         "it is not in the CUDA toolkit here")
    return found


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise UsageError(f"{command[0]}: {e}") from None
    if done.returncode != 0:
        raise BuildError(f"{Path(command[0]).name} failed: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def _kept(where: Path, suffix: str) -> Path:
    """The PTX or cubin nvcc kept; with several arches (cuda.compute_80.cubin, ...), the newest."""
    files = sorted((where / KEEP).glob(f"*{suffix}"), key=lambda f: int(re.sub(r"\D", "", f.name) or 0))
    if not files:
        raise BuildError(f"{where.name} kept no {suffix} file (a build from an older kplay?): run kplay clean")
    return files[-1]


def demangle(symbols: list[str]) -> dict[str, str]:
    """Mangled name -> readable one, through c++filt when it is there (else the names stay as they are)."""
    filt = shutil.which("c++filt")
    if not filt or not symbols:
        return {s: s for s in symbols}
    done = subprocess.run([filt], input="\n".join(symbols), capture_output=True, text=True)
    names = done.stdout.splitlines()
    return dict(zip(symbols, names)) if done.returncode == 0 and len(names) == len(symbols) else {s: s for s in symbols}


# ---- the listings --------------------------------------------------------------------------------------

def listings(kind: str, where: Path, family, variant) -> list[Listing]:
    """The build's functions of one kind (ptx, sass, asm), file names the student's."""
    if kind == "ptx":
        found = parse_ptx(_kept(where, ".ptx").read_text())
    elif kind == "sass":
        found = parse_sass(_sass(where))
    else:
        found = parse_objdump(_run(["objdump" if shutil.which("objdump") else _missing("objdump"),
                                    "-d", "-l", "-C", "-r", "--no-show-raw-insn", str(where / "main.o")]))
        found = [f for f in found if any(is_students(g.file, where, family) for g in f.groups)]
    names = demangle([f.symbol for f in found]) if kind != "asm" else {}
    for f in found:
        f.name = NAMESPACE.sub("", names.get(f.symbol, f.name))
        for g in f.groups:
            g.file = student_file(g.file, where, family, variant) if g.line else ""
    return found


NAMESPACE = re.compile(r"\bkplay_\w+?_[0-9a-f]{12}::")  # the build's own namespace (KPLAY_NS): a hash, no news


def _missing(name: str) -> str:
    raise UsageError(f"{name} not found: it comes with binutils (Linux) or the Xcode command line tools (macOS)")


def _sass(where: Path) -> str:
    """nvdisasm's text of the kept cubin, cached beside it."""
    cubin = _kept(where, ".cubin")
    cached = cubin.with_suffix(".sass")
    if not cached.exists():
        text = _run([tool("nvdisasm"), "--print-line-info", "-c", str(cubin)])
        cached.with_suffix(".partial").write_text(text)
        cached.with_suffix(".partial").rename(cached)
    return cached.read_text()


SASS_FUNCTION = re.compile(r"^//-+ \.text\.(?P<symbol>\S+) -+$")
SASS_LINE = re.compile(r'^\s*//## File "(?P<file>[^"]+)", line (?P<line>\d+)')
SASS_CODE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?P<code>.*?)\s*;?\s*$")
LABEL = re.compile(r"^(?P<label>[.$]L\w+):")


def parse_sass(text: str) -> list[Listing]:
    """nvdisasm --print-line-info: a listing per .text section, instructions under their `//## File` marks."""
    out: list[Listing] = []
    file, line = "", 0
    for raw in text.splitlines():
        if m := SASS_FUNCTION.match(raw):
            out.append(Listing(m["symbol"], m["symbol"]))
            file, line = "", 0
        elif not out:
            continue
        elif m := SASS_LINE.match(raw):
            file, line = m["file"], int(m["line"])
        elif (m := SASS_CODE.match(raw)) and m["code"] != "NOP":  # NOPs pad the end of a kernel
            out[-1].add(file, line, re.sub(r"\s+", " ", m["code"]))
        elif m := LABEL.match(raw.strip()):
            out[-1].add(file, line, f"{m['label']}:")
    return out


PTX_FUNCTION = re.compile(r"^(?:\.visible |\.weak |\.extern )*\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(?P<symbol>[\w$]+)")
PTX_LOC = re.compile(r"^\s*\.loc\s+(?P<file>\d+)\s+(?P<line>\d+)")
PTX_FILE = re.compile(r'^\s*\.file\s+(?P<n>\d+)\s+"(?P<path>[^"]+)"')


def parse_ptx(text: str) -> list[Listing]:
    """PTX with .loc directives: a listing per .entry / .func, its body's lines under the last .loc."""
    files = {m["n"]: m["path"] for m in map(PTX_FILE.match, text.splitlines()) if m}
    out: list[Listing] = []
    body, loc = False, ("", 0)
    for raw in text.splitlines():
        if m := PTX_FUNCTION.match(raw):
            out.append(Listing(m["symbol"], m["symbol"]))
            body, loc = False, ("", 0)
        elif out and raw == "{":
            body = True
        elif body and raw == "}":
            body = False
        elif body and (m := PTX_LOC.match(raw)):
            loc = (files.get(m["file"], ""), int(m["line"]))
        elif body and raw.strip() and not raw.strip().startswith("//"):
            out[-1].add(*loc, re.sub(r"\s+", " ", raw.strip()))
    return out


OBJ_FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>.+)>:$")
OBJ_LINE = re.compile(r"^(?:; )?(?P<file>\S.*?):(?P<line>\d+)(?: \(discriminator \d+\))?$")
OBJ_CODE = re.compile(r"^\s+[0-9a-f]+:\s+(?P<code>\S.*)$")
OBJ_RELOC = re.compile(r"^\s+[0-9a-f]+: R_\w+\s+(?P<target>\S+?)(?:-0x[0-9a-f]+)?$")


def parse_objdump(text: str) -> list[Listing]:
    """objdump -d -l -C -r of an object file: a listing per function, a relocation named in its instruction."""
    out: list[Listing] = []
    file, line = "", 0
    for raw in text.splitlines():
        if m := OBJ_FUNCTION.match(raw):
            out.append(Listing(m["name"], m["name"]))
            file, line = "", 0
        elif not out:
            continue
        elif m := OBJ_RELOC.match(raw):  # in an object file a call's target is a relocation, not an address
            if out[-1].groups:
                code = out[-1].groups[-1].code
                code[-1] = re.sub(r"\s+(?:[0-9a-f]+ <[^>]*>|# .*)$", "", code[-1]) + f" <{m['target']}>"
        elif m := OBJ_CODE.match(raw):
            out[-1].add(file, line, re.sub(r"\s+", " ", m["code"]))
        elif m := OBJ_LINE.match(raw):
            file, line = m["file"], int(m["line"])
    return out


def pick(found: list[Listing], kernel: str | None, what: str) -> list[Listing]:
    """The listings whose readable or mangled name contains `kernel` (all without it); none is an error."""
    if not kernel:
        return found
    chosen = [f for f in found if kernel in f.name or kernel in f.symbol]
    if not chosen:
        names = ", ".join(dict.fromkeys(short_name(f.name, width=200) for f in found)) or "none"
        raise UsageError(f"--kernel {kernel}: no function of {what} has that in its name; it has: {names}")
    return chosen


def to_json(found: list[Listing], sources: dict[str, list[str]]) -> list[dict]:
    """Plain data for --json: each group with its source line's text."""
    def text(g: Group) -> str:
        lines = sources.get(g.file, [])
        return lines[g.line - 1] if 0 < g.line <= len(lines) else ""

    return [{"name": f.name, "symbol": f.symbol,
             "groups": [{"file": g.file, "line": g.line, "source": text(g), "code": g.code} for g in f.groups]}
            for f in found]


def source_lines(found: list[Listing], where: Path, family, variant) -> dict[str, list[str]]:
    """Each file's lines, for the listing's headings: the student's as compiled (rendered), others as on disk."""
    out = {}
    for file in {g.file for f in found for g in f.groups if g.file}:
        own = {student_file(str(where / n), where, family, variant): where / n for n in ("main.cpp", "cuda.cu")}
        try:
            out[file] = Path(own.get(file, file)).read_text(errors="replace").splitlines()
        except OSError:
            out[file] = []
    return out


def require(kind: str, family, variant) -> None:
    """Refuse what cannot be shown before anything is built: no source of that kind, no disassembler, no nvcc."""
    from .toolchain import cuda_home

    what = f"{family.name}/{variant.name}"
    if kind in ("ptx", "sass") and not any(s.endswith(".cu") for s in variant.sources):
        hint = "; --asm shows its C++ code" if variant.sources else ""
        raise UsageError(f"--{kind}: {what} is a {variant.device} variant with no CUDA source{hint}")
    if kind == "asm" and not any(not s.endswith(".cu") for s in variant.sources):
        raise UsageError(f"--asm: {what} has no C++ source" + ("; try --sass or --ptx" if variant.sources else ""))
    if kind == "sass":
        tool("nvdisasm")
    if kind in ("ptx", "sass") and cuda_home() is None:
        raise UsageError(f"--{kind} needs nvcc (the CUDA toolkit) to compile {what}; none was found")


def compiled(kind: str, family, variant, params: dict, on_event) -> tuple[list[Listing], dict, list]:
    """Build the variant (or find it cached) and read its code: (listings, source lines by file, loops)."""
    import logging

    require(kind, family, variant)
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found" on CPU boxes
    _, info = build(family, variant, params, on_event)
    where = folder(info.name)
    found = listings(kind, where, family, variant)
    return found, source_lines(found, where, family, variant), loops(where, family, variant)
