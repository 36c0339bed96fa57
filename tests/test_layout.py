"""Every report reads at 80 columns: no line longer than the terminal, nothing cut with '…'."""

import pytest
from typer.testing import CliRunner

from conftest import ROOT

COMMANDS = [
    ["list"],
    ["show", "sum"],
    ["show", "lltm", "--device", "cpu"],
    ["show", "sum", "--asm", "--kernel", "sum_all<float>"],
    ["show", "sum", "--variant", "fast", "--ptx", "--kernel", "<float>"],  # exit 2, one line, without nvcc
    ["run", "sum", "--n", "1e5", "--device", "cpu"],
    ["run", "print_array", "--values", "4,3,2,1", "--device", "cpu"],
    ["run", "linear", "--device", "cpu", "--batch", "64", "--in", "64", "--out", "64"],
    ["run", "lltm", "--device", "cpu", "--skip-baseline", "torch.compile"],
    ["run", "lltm", "--help"],
    ["bench", "sum", "--device", "cpu", "--sizes", "1e3,1e4"],
    ["doctor"],
    ["run", "summ"],
    ["run", "sum", "--devic", "cpu"],
    ["profile", "sum", "--device", "cpu"],
    ["run", "sum", "--sanitize", "memchek"],
    ["board", *(f"tests/data/board/{name}.json" for name in ("ada", "bob", "cy", "dee", "eve", "fay")), "--out", "{tmp}"],
    ["board", "tests/data/board/ada.json", "tests/data/board/nobody.json"],
]


@pytest.mark.slow
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_every_report_fits_80_columns(args, tmp_path, monkeypatch):
    from cli import app

    monkeypatch.chdir(ROOT)  # the board's records are in tests/data; what it writes goes to tmp_path
    args = [str(tmp_path) if a == "{tmp}" else a for a in args]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"})
    assert result.exit_code in (0, 2), result.output
    written = str(tmp_path)  # "wrote PATH" stays one line however long the path, so it can be copied
    lines = [line for line in result.output.splitlines() if not line.startswith(f"wrote {written}")]
    assert lines and max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    assert "…" not in result.output
    if args[0] == "show":  # a title is never cut, as a panel's border would cut it
        assert "reduction ladder on the GPU" in " ".join(result.output.split()) or args[1:] != ["sum"]


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
