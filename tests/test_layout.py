"""Every report reads at 80 columns; every --help exits 0; each usage error is one line and exit 2; the
student-facing files under snippets/ speak to students."""

import re
import shutil

import pytest
import typer
from typer.testing import CliRunner

from conftest import ROOT
from playground.compiler.toolchain import cuda_home

NVCC = 0 if cuda_home() else 2  # show --ptx: one line and exit 2 without nvcc
# (args, the exit codes it may give): doctor's is its verdict, 0 or 1.
COMMANDS = [
    (["list"], {0}),
    (["show", "sum"], {0}),
    (["show", "lltm", "--device", "cpu"], {0}),
    (["show", "sum", "--asm", "--kernel", "sum_all<float>", "--solution"], {0}),
    (["show", "sum", "--variant", "fast", "--ptx", "--kernel", "<float>"], {NVCC}),
    (["run", "sum", "--n", "1e5", "--device", "cpu"], {0}),
    (["run", "print_array", "--values", "4,3,2,1", "--device", "cpu"], {0}),
    (["run", "linear", "--device", "cpu", "--batch", "64", "--in", "64", "--out", "64"], {0}),
    (["run", "lltm", "--device", "cpu", "--skip-baseline", "torch.compile"], {0}),
    (["run", "lltm", "--help"], {0}),
    (["bench", "sum", "--device", "cpu", "--sizes", "1e3,1e4"], {0}),
    (["doctor"], {0, 1}),
    (["run", "summ"], {2}),
    (["run", "sum", "--devic", "cpu"], {2}),
    (["profile", "sum", "--device", "cpu"], {2}),
    (["run", "sum", "--sanitize", "memchek"], {2}),
    (["board", *(f"tests/data/board/{name}.json" for name in ("ada", "bob", "cy", "dee", "eve", "fay")), "--out", "{tmp}"],
     {0}),
    (["board", "tests/data/board/ada.json", "tests/data/board/nobody.json"], {2}),
]
ENV = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}


def commands() -> list[str]:
    from cli import app

    return sorted(typer.main.get_command(app).commands)


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("command", commands())
def test_every_command_help_exits_0_and_shows_its_usage(command, flag):
    from cli import app

    result = CliRunner().invoke(app, [command, flag], env=ENV)
    assert result.exit_code == 0, result.output
    assert re.search(rf"Usage: .*\b{command}\b", result.stdout) and not result.stderr, result.output


@pytest.mark.parametrize("args, says", [
    (["run"], "kplay run: missing the kernel's NAME"),
    (["profile"], "kplay profile: missing the kernel's NAME"),
    (["watch"], "kplay watch: missing the kernel's FOLDER"),
    (["show"], "Missing argument 'NAME'"),
    (["list", "--nope"], "No such option: --nope"),
    (["run", "sum", "--nope", "3"], "--nope does not apply to sum"),
    (["run", "lltm", "--no-compile"], "--no-compile does not apply to lltm"),  # gone: --skip-baseline torch.compile
    (["bench", "sum", "--explain"], "--explain is not an option of this command"),
    (["run", "sum", "--baseline", "nope"], "--baseline nope: sum has no such baseline"),
    (["watch", "snippets/sum", "--n"], "--n needs a value"),
])
def test_each_usage_error_is_one_line_and_exit_2(args, says, monkeypatch):
    from cli import app

    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, args, env=ENV)
    assert result.exit_code == 2, result.output
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.output and "Usage:" not in result.output


@pytest.mark.slow
@pytest.mark.parametrize("args, codes", COMMANDS, ids=[" ".join(args) for args, _ in COMMANDS])
def test_every_report_fits_80_columns(args, codes, tmp_path, monkeypatch):
    from cli import app

    monkeypatch.chdir(ROOT)  # the board's records are in tests/data; what it writes goes to tmp_path
    args = [str(tmp_path) if a == "{tmp}" else a for a in args]
    result = CliRunner().invoke(app, args, env=ENV)
    assert result.exit_code in codes, result.output
    written = str(tmp_path)  # "wrote PATH" stays one line however long the path, so it can be copied
    lines = [line for line in result.output.splitlines() if not line.startswith(f"wrote {written}")]
    assert lines and max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    assert "…" not in result.output
    if args[0] == "show":  # a title is never cut, as a panel's border would cut it
        assert "reduction ladder on the GPU" in " ".join(result.output.split()) or args[1:] != ["sum"]
    if args[:2] == ["run", "lltm"] and "--help" not in args:
        rate_on_the_call_row(lines)


def rate_on_the_call_row(lines: list[str]) -> None:
    """lltm's forward and backward rows have no rate: the GFLOP/s is the whole call's, on the `call` row."""
    head = next(line for line in lines if "GFLOP/s" in line)
    end = head.index("GFLOP/s") + len("GFLOP/s")
    column = lambda line: line[end - 9:end].strip()  # noqa: E731
    steps = [line for line in lines if (" forward " in line or " backward " in line) and "s  " in line]
    calls = [line for line in lines if " call " in line and "s  " in line]
    assert len(steps) == 2 * len(calls) >= 4 and all(column(line) == "" for line in steps), lines
    assert all(float(column(line)) > 0 for line in calls), lines


@pytest.mark.cuda
@pytest.mark.parametrize("args", [["run", "sum", "--device", "cuda", "--variant", "all", "--n", "1e6"],
                                  ["run", "lltm", "--device", "cuda", "--skip-baseline", "torch.compile"]],
                         ids=" ".join)
def test_gpu_runs_with_their_kernel_lines_fit_80_columns(args):
    """On a GPU the run adds a line or two per kernel (resources, launch, occupancy): still 80 columns."""
    from cli import app

    result = CliRunner().invoke(app, args, env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    assert "…" not in result.output and "occupancy" in result.output


def test_the_verdict_is_never_cut_in_a_narrow_terminal():
    from cli import app

    result = CliRunner().invoke(app, ["run", "sum", "--device", "cpu", "--n", "1e3"],
                                env={"COLUMNS": "40", "NO_COLOR": "1", "TERM": "dumb"})
    row = next(line for line in result.output.splitlines() if line.startswith(("cpp ", "cpp\u2026")))
    assert result.exit_code == 0 and " PASS " in row and result.output.rstrip().endswith("PASS"), result.output


SNIPPETS = sorted(p for p in (ROOT / "snippets").rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_snippets_name_the_tutorial_or_the_post_not_the_project_history():
    """A student does not know kplay's issues or its seed posts: a file names the tutorial or the post instead."""
    history = re.compile(r"\bissue|\bseed [0-9]|\bthe seed\b|\bseed 00", re.IGNORECASE)
    found = [f"{p.relative_to(ROOT)}:{k}: {line.strip()}" for p in SNIPPETS
             for k, line in enumerate(p.read_text().splitlines(), 1) if history.search(line)]
    assert not found


def test_snippet_lines_fit_120_columns():
    """Sources, specs and task.toml (hints included) read in an editor without scrolling; Markdown tables cannot wrap."""
    long = [f"{p.relative_to(ROOT)}:{k} ({len(line)})" for p in SNIPPETS if p.suffix != ".md"
            for k, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 120]
    assert not long


def test_every_kernel_source_reads_in_one_sitting():
    """A kernel source (.cpp, .cu, .h, .cuh) is at most 250 lines: a longer one is split where its parts are
    separate ideas (a header for the helpers, one file per step of a ladder)."""
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in SNIPPETS if p.suffix in (".cpp", ".cu", ".h", ".cuh")
            for n in [len(p.read_text().splitlines())] if n > 250]
    assert not long


@pytest.mark.nvcc
def test_show_ptx_and_export_at_80_columns_keep_every_file_name_whole(tmp_path, monkeypatch):
    """A panel is titled by its file (sum_cuda.cpp and sum_tree.cu are told apart), a folder wraps only after a
    '/', and the command to paste is one line, however long."""
    from cli import app

    monkeypatch.chdir(ROOT)
    env = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
    shown = CliRunner().invoke(app, ["show", "sum", "--variant", "fast", "--solution"], env=env).stdout
    assert "╭─ sum_cuda.cpp ─" in shown and "╭─ sum_fast.cu ─" in shown and "╭─ ladder.cuh ─" not in shown
    deep = tmp_path / "workshop-day-one" / "the-students-folders" / "a-kernel-playground" / "sum"  # over 80 in all
    shutil.copytree(ROOT / "snippets" / "sum", deep)
    ptx = CliRunner().invoke(app, ["show", str(deep), "--variant", "fast", "--ptx", "--kernel", "<float>", "--solution"],
                             env=env)
    assert ptx.exit_code == 0, ptx.output
    lines = ptx.stdout.splitlines()
    head = next(k for k, line in enumerate(lines) if "· ptx ·" in line)
    assert lines[head] == "sum/fast · ptx · sum_fast.cu"
    folder = []
    for line in lines[head + 1:]:
        if not (line.startswith("from ") or line.startswith("  ") and " " not in line.strip()) or len(folder) > 4:
            break
        folder.append(line)
    assert max(map(len, folder)) <= 80 and "".join(f.strip() for f in folder) == f"from {deep}", folder
    assert all(line.rstrip().endswith("/") for line in folder[:-1])  # broken after a '/', never inside a name
    exported = CliRunner().invoke(app, ["export", "sum", str(deep.parent / "pkg")], env=env)
    assert exported.exit_code == 0, exported.output
    command = next(line for line in exported.stdout.splitlines() if " -m pip install " in line)
    assert command.endswith(f"-m pytest {deep.parent / 'pkg'}/tests") and len(command) > 80

