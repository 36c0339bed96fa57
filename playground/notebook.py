"""`%load_ext playground` in Jupyter: `%kplay COMMAND ...` and a `%%kplay run NAME ...` cell whose body is the kernel.

Every command runs the kplay CLI in a child process, so a kernel that segfaults takes down that child
only, never the notebook's kernel. The cell's body goes into a copy of the variant's files (as `kplay eject`
writes them) and `kplay run` runs that folder: the same build, check, timing and report as in a terminal.

The engine is imported where a magic first needs it: `import playground` (in a child, a script) stays light.
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from .core.errors import KplayError, UsageError

COLUMNS = 100  # the child's terminal width: kplay's reports are laid out for 80
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RED_ERROR = "\x1b[31merror:\x1b[0m "
CELL_USAGE = "%%kplay run NAME [--variant V] [--file FILE] [options], the kernel's source in the cell"
EXIT_CODES = {1: "the check failed", 3: "the build failed", 4: "the kernel crashed"}


class CellError(Exception):
    """kplay's error lines as the cell's error output, with no Python traceback (IPython asks for these)."""

    def __init__(self, lines: list[str]):
        super().__init__(ANSI.sub("", lines[0]) if lines else "")
        self.lines = lines

    def _render_traceback_(self) -> list[str]:
        return self.lines


def load_ipython_extension(ipython) -> None:
    ipython.register_magic_function(kplay, magic_kind="line_cell", magic_name="kplay")


def kplay(line: str, cell: str | None = None) -> None:
    """%kplay COMMAND ...: a kplay command; %%kplay run NAME ...: run the cell's source as the kernel's."""
    folder = None
    try:
        args = _split(line)
        if cell is not None:
            args, folder = _cell_run(args, cell)
        elif args[:1] == ["load"]:
            return _replace_cell(_load_cell(args[1:]))
        elif args[:1] == ["watch"]:
            raise UsageError("kplay watch never ends in a notebook: run a %%kplay cell again after each edit")
        code, out, err = _child(args)
    except KplayError as e:
        raise CellError([RED_ERROR + str(e), *getattr(e, "details", [])]) from None
    _show(code, out, err, folder)


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as e:  # an unclosed quote
        raise UsageError(f"%kplay {line.strip()}: {e}") from None


def _cell_run(args: list[str], body: str) -> tuple[list[str], Path]:
    """The cell's `run NAME ...`: the variant's files with the body in place of one; the CLI's arguments."""
    from . import engine

    if not args or args[0] != "run" or len(args) < 2 or args[1].startswith("-"):
        what = f"%%kplay {args[0]}: the cell magic runs a kernel; " if args and args[0] != "run" else ""
        raise UsageError(f"{what or 'a kernel name is missing; '}usage: {CELL_USAGE}")
    fam, variant, values, file, rest = _pick(args[1], args[2:])
    folder = _eject(fam, variant, values)
    text = engine.render_text(body, fam.params_for(variant, values), where=f"the cell ({file})")
    (folder / file).write_text("\n" + text)  # line 1 is the %%kplay line: the compiler's line numbers are the cell's
    return ["run", str(folder), "--variant", variant.name, *rest], folder


def _pick(name: str, args: list[str]):
    """The family, the variant, its parameters and the file a cell holds; the options left for kplay run."""
    from . import engine

    files, rest = _take(args, "--file")
    params, rest = _take(rest, "--param", "-p")
    paths, rest = _take(rest, "--path")
    variants, rest = _take(rest, "--variant")
    devices, _ = _take(list(rest), "--device")
    fam = engine.find(name, paths)
    variant = _variant(fam, variants[-1] if variants else None, devices[-1] if devices else "auto")
    return fam, variant, fam.parse_params(params, [variant]), _target(fam, variant, files[-1] if files else None), rest


def _load_cell(args: list[str]) -> str:
    """`%kplay load NAME [--starter] ...`: a %%kplay run cell holding the variant's file (an exercise's starter)."""
    from . import engine

    if not args or args[0].startswith("-"):
        raise UsageError("a kernel name is missing; usage: %kplay load NAME [--variant V] [--file FILE] [--starter]")
    starter = "--starter" in args
    fam, variant, values, file, rest = _pick(args[0], [a for a in args[1:] if a != "--starter"])
    text = engine.variant_files(fam, variant, values, starter)[file]
    takes = {**fam.params, **variant.params}
    params = [x for k, v in values.items() if takes[k].default != v for x in ("--param", f"{k}={v}")]
    chosen = ["--file", file] if file != _target(fam, variant, None) else []
    paths = [x for p in _take(args[1:], "--path")[0] for x in ("--path", p)]  # where the cell finds the family again
    first = [args[0], *paths, "--variant", variant.name, *chosen, *params, *rest]
    return f"%%kplay run {shlex.join(first)}\n{text.rstrip()}\n"


def _replace_cell(text: str) -> None:
    """The cell becomes `text`, as IPython's %load does."""
    from IPython import get_ipython

    get_ipython().set_next_input(text, replace=True)


def _take(args: list[str], *names: str) -> tuple[list[str], list[str]]:
    """Every `--name VALUE` or `--name=VALUE` of these names, pulled out of args: (values, the rest)."""
    values, rest, i = [], [], 0
    while i < len(args):
        key, eq, value = args[i].partition("=")
        if key not in names:
            rest.append(args[i])
            i += 1
            continue
        if not eq and i + 1 == len(args):
            raise UsageError(f"{key} needs a value")
        values.append(value if eq else args[i + 1])
        i += 1 if eq else 2
    return values, rest


def _variant(fam, name: str | None, device: str):
    """The variant the body belongs to: --variant, or the default one where `kplay run` would run."""
    from . import engine

    if name == "all":
        raise UsageError("--variant all: the cell holds one variant's source; name one variant")
    if name:
        return fam.variant(name)
    if device == "auto" and fam.variants_for("cuda"):  # a GPU or not: the same rule as kplay run's
        device = engine.resolve_device(device, fam)
    return fam.pick_variants("cpu" if device == "auto" else device, None)[0]


def _target(fam, variant, file: str | None) -> str:
    """--file, or the variant's first source (a CUDA variant's .cu file)."""
    names = [*variant.sources, *variant.includes]
    if file is None:
        cuda = [s for s in variant.sources if s.endswith(".cu")]
        if not names:
            raise UsageError(f"{fam.name}/{variant.name} has no source for the cell to replace")
        return (cuda or names)[0]
    if file not in names:
        raise UsageError(f"--file {file}: {fam.name}/{variant.name}'s files are {', '.join(names)}")
    return file


def _eject(fam, variant, values: dict) -> Path:
    """The variant's files, a solution's and not a starter's (the body replaces one anyway), in this kernel's folder."""
    from . import engine

    folder = _workdir() / f"{fam.name}-{variant.name}"
    engine.eject(fam, folder, None, variant.name, values, force=True, starter=False)
    return folder


@cache
def _workdir() -> Path:
    """One temp folder per notebook kernel, removed when it exits."""
    path = Path(tempfile.mkdtemp(prefix="kplay-notebook-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _child(args: list[str]) -> tuple[int, str, str]:
    """The kplay CLI in a child process: its exit code, stdout and stderr, coloured as on a terminal."""
    env = {**os.environ, "COLUMNS": str(COLUMNS), "FORCE_COLOR": "1", "TERM": "xterm-256color",
           "TTY_INTERACTIVE": "0"}  # colour, and no spinner
    child = subprocess.Popen([sys.executable, "-m", "playground.cli", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, text=True, errors="replace", start_new_session=True)
    try:
        out, err = child.communicate()
    except KeyboardInterrupt:  # the notebook's stop button: kplay ends its worker and compiler on SIGTERM
        os.killpg(child.pid, signal.SIGTERM)
        child.wait()
        raise UsageError("interrupted") from None
    return child.returncode, out, err


def _show(code: int, out: str, err: str, folder: Path | None) -> None:
    """The child's notes and report as rich output; a failure as the cell's error: kplay's lines, no traceback."""
    if folder is not None:  # the compiler's lines name the cell's file, not the temp folder
        out, err = out.replace(f"{folder}{os.sep}", ""), err.replace(f"{folder}{os.sep}", "")
    lines = err.splitlines()
    first = next((i for i, x in enumerate(lines) if ANSI.sub("", x).startswith("error:")), len(lines))
    notes = "\n".join(lines[:first])
    report = "\n".join(filter(None, [notes, out.rstrip("\n")]))
    if report:
        from rich.console import Console
        from rich.text import Text

        Console(soft_wrap=True).print(Text.from_ansi(report))
    if code != 0:
        raise CellError(lines[first:] or [RED_ERROR + EXIT_CODES.get(code, f"kplay exited with code {code}")])
