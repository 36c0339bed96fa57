"""The notebook magics: examples/workshop.ipynb and bad cells, executed by nbclient in a real ipykernel."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import ROOT
from playground import magic
from playground.errors import UsageError

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUM = (ROOT / "snippets" / "sum" / "sum.cpp").read_text()
TAIL = "for (; i < end; ++i) total += x[i];"
CHECK_ONLY = "%%kplay run sum --variant cpp --device cpu --no-bench\n"
FAILING = {  # cells that must fail, each with what its one error output says
    "syntax": (CHECK_ONLY + SUM.replace(TAIL, TAIL[:-1]), "compile error in sum.cpp:"),
    "segfault": (CHECK_ONLY + SUM.replace("Tensor out = empty_scalar_like(c);",
                                          "Tensor out = empty_scalar_like(c);\n  *(volatile int*)nullptr = 1;"),
                 "kernel crashed: segmentation fault"),
    "no name": ("%%kplay\n" + SUM, "a kernel name is missing; usage: %%kplay run NAME"),
    "no kernel": ("%%kplay run\n" + SUM, "a kernel name is missing"),
    "not run": ("%%kplay list\nint x;", "%%kplay list: the cell magic runs a kernel"),
    "unknown command": ("%kplay nosuch", "No such command 'nosuch'"),
}


def text(output) -> str:
    """What a student reads in one output, without the colours."""
    if output.output_type == "error":
        return ANSI.sub("", "\n".join(output.traceback))
    return ANSI.sub("", output.get("text") or output.get("data", {}).get("text/plain", ""))


def execute(nb, tmp_path_factory):
    """Run nb in a fresh kernel: this interpreter's (a kernelspec on a private JUPYTER_PATH, whatever is
    installed for the user), with this checkout on its path (the GPU box runs it uninstalled). It inherits
    the session's KPLAY_CACHE, so every cell shares one build cache."""
    spec = tmp_path_factory.mktemp("jupyter")
    (spec / "kernels" / "kplay-test").mkdir(parents=True)
    (spec / "kernels" / "kplay-test" / "kernel.json").write_text(json.dumps(
        {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "kplay test",
         "language": "python", "env": {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}}))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(spec)
    try:
        nbclient.NotebookClient(nb, kernel_name="kplay-test", timeout=300,
                                resources={"metadata": {"path": str(tmp_path_factory.mktemp("cwd"))}}).execute()
    finally:
        os.environ.pop("JUPYTER_PATH") if old is None else os.environ.update(JUPYTER_PATH=old)
    return nb


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The workshop notebook, then the bad cells around `x = 41` ... `print(x + 1)`."""
    nb = nbformat.read(ROOT / "examples" / "workshop.ipynb", as_version=4)
    new = nbformat.v4.new_code_cell
    nb.cells += [new("x = 41"), new("%kplay load sum --variant cpp --device cpu"),
                 *(new(source, metadata={"tags": ["raises-exception"], "case": case}) for case, (source, _) in FAILING.items()),
                 new("print(x + 1)")]
    return execute(nb, tmp_path_factory)


@pytest.mark.cuda
def test_a_cuda_cell_runs_its_kernel_on_the_gpu(tmp_path_factory):
    fast = (ROOT / "snippets" / "sum" / "sum_fast.cu").read_text()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%load_ext playground"),
                                         nbformat.v4.new_code_cell("%%kplay run sum --variant fast --n 1e7\n" + fast)])
    run = execute(nb, tmp_path_factory).cells[1]
    shown = "\n".join(text(o) for o in run.outputs)
    assert [o.output_type for o in run.outputs] == ["display_data"], shown
    assert "sum · cuda · float32" in shown and re.search(r"fast\s+PASS", shown) and "×torch.sum" in shown


def cell(nb, start: str):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(start))


@pytest.mark.slow
def test_the_workshop_notebook_runs_sum_cpp_and_shows_the_report(executed):
    run = cell(executed, "%%kplay run sum --variant cpp --device cpu --n 1e6")
    shown = "\n".join(text(o) for o in run.outputs)
    assert [o.output_type for o in run.outputs] == ["display_data"], shown
    assert "text/html" in run.outputs[0].data
    for words in ("sum · cpu · float32 · n=1,000,000", "variant", "×torch.sum", "torch.sum", "\nPASS"):
        assert words in shown
    assert re.search(r"cpp\s+PASS", shown) and "kplay-notebook" not in shown
    listed = text(cell(executed, "%kplay list").outputs[0])
    assert "print_array" in listed and "lltm" in listed


@pytest.mark.slow
@pytest.mark.parametrize("case", FAILING)
def test_a_failing_cell_shows_one_error_and_no_traceback(executed, case):
    source, message = FAILING[case]
    found = next(c for c in executed.cells if c.metadata.get("case") == case)
    errors = [o for o in found.outputs if o.output_type == "error"]
    assert len(errors) == 1 and message in text(errors[0]), [text(o) for o in found.outputs]
    assert text(errors[0]).startswith("error: ") and "Traceback" not in text(errors[0])
    if case != "syntax":
        assert len(errors[0].traceback) == 1


@pytest.mark.slow
def test_a_syntax_error_shows_the_compilers_line_in_the_cells_file(executed):
    shown = text(next(c for c in executed.cells if c.metadata.get("case") == "syntax").outputs[-1])
    line = SUM.splitlines().index(next(x for x in SUM.splitlines() if TAIL in x)) + 2  # the cell's line: %%kplay is 1
    assert f"sum.cpp:{line}:" in shown and "expected ';'" in shown.replace("‘", "'").replace("’", "'")
    assert "kplay-notebook" not in shown  # the temp folder is left out: the cell is the file


@pytest.mark.slow
def test_the_kernel_survives_a_segfault(executed):
    assert text(cell(executed, "print(x + 1)").outputs[0]) == "42\n"


@pytest.mark.slow
def test_load_replaces_its_cell_quietly(executed):
    assert cell(executed, "%kplay load").outputs == []  # set_next_input: a payload for the front end, no output


def test_a_loaded_cell_holds_the_variants_file_and_runs_it_as_it_was():
    loaded = magic._load_cell(magic._split("sum --variant cpp --device cpu --n 1e6"))
    first, body = loaded.split("\n", 1)
    assert first == "%%kplay run sum --variant cpp --device cpu --n 1e6" and body == SUM
    args, folder = magic._cell_run(magic._split(first.removeprefix("%%kplay ")), body)
    assert (folder / "sum.cpp").read_text() == "\n" + SUM and args[-4:] == ["--device", "cpu", "--n", "1e6"]


def test_load_gives_an_exercises_starter_and_names_a_chosen_file():
    starter = magic._load_cell(magic._split("sum --variant shuffle --starter -p threads=512"))
    assert starter.startswith("%%kplay run sum --variant shuffle --param threads=512\n") and "// TODO 1:" in starter
    header = magic._load_cell(magic._split("sum --variant shuffle --file ladder.cuh"))
    assert header.startswith("%%kplay run sum --variant shuffle --file ladder.cuh\n")
    with pytest.raises(UsageError, match="a kernel name is missing"):
        magic._load_cell([])


def test_a_loaded_cell_finds_a_family_from_path_again(tmp_path):
    shutil.copytree(ROOT / "snippets" / "sum", tmp_path / "mine")
    loaded = magic._load_cell(["mine", "--path", str(tmp_path), "--variant", "cpp", "--device", "cpu"])
    first, body = loaded.split("\n", 1)
    assert first == f"%%kplay run mine --path {tmp_path} --variant cpp --device cpu"
    args, folder = magic._cell_run(magic._split(first.removeprefix("%%kplay ")), body)
    assert (folder / "sum.cpp").read_text() == "\n" + body and "--path" not in args


@pytest.mark.parametrize("line, message", [
    ("run sum --file", "--file needs a value"),
    ("run sum --variant cpp --file sum.cu", "--file sum.cu: sum/cpp's files are sum.cpp"),
    ("run sum --variant all", "--variant all: the cell holds one variant's source"),
    ("run sum --variant nope", "sum has no variant 'nope'"),
    ("run nosuch", "unknown kernel 'nosuch'"),
    ("run sum --variant cpp --param threads=3", "--param threads=3: valid values are"),
])
def test_bad_cell_options_are_one_line_before_any_child(line, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        magic._cell_run(magic._split(line), "int x;")


def test_a_cuda_variants_cell_is_its_cu_file_and_the_rest_are_ejected():
    args, folder = magic._cell_run(magic._split("run sum --variant shuffle -p threads=512 --n 1e6"), "// mine\n")
    assert args == ["run", str(folder), "--variant", "shuffle", "--n", "1e6"]
    assert (folder / "sum_shuffle.cu").read_text() == "\n// mine\n" and "TODO" not in (folder / "sum_cuda.cpp").read_text()
    assert (folder / "ladder.cuh").exists() and (folder / "task.toml").exists()
    args, folder = magic._cell_run(magic._split("run sum --variant shuffle --file=ladder.cuh"), "// header\n")
    assert (folder / "ladder.cuh").read_text() == "\n// header\n" and "kplay:todo" in (folder / "sum_shuffle.cu").read_text()


def test_a_failed_check_shows_the_report_then_fails_the_cell(capsys):
    with pytest.raises(magic.CellError) as failed:
        magic._show(1, "variant  check\ncpp      FAIL\n", "", None)
    assert "cpp      FAIL" in capsys.readouterr().out
    assert failed.value._render_traceback_() == [magic.RED_ERROR + "the check failed"]


def test_the_stop_button_ends_the_child(monkeypatch):
    """KeyboardInterrupt (Jupyter's interrupt) while the child runs: it is ended and reaped, one line."""
    started, real = [], subprocess.Popen

    def popen(*args, **kwargs):  # the interrupt comes a second after the child has started
        started.append(real(*args, **kwargs))
        signal.alarm(1)
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        with pytest.raises(UsageError, match="^interrupted$"):
            magic._child(["run", "sum", "--device", "cpu", "--variant", "cpp", "--n", "1e8"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert started[0].returncode is not None  # ended and waited for: no zombie, no orphan
