"""The notebook magics: examples/workshop.ipynb and bad cells, executed by nbclient in a real ipykernel."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT
from playground import notebook as magic

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


@pytest.fixture
def child(monkeypatch):
    """The CLI child that magic.kplay starts, stood in for: `child.args` are its arguments (None until one
    starts), and it answers `child.code`, `child.out` and `child.err`."""
    seen = SimpleNamespace(args=None, code=0, out="", err="")

    class Child:
        def __init__(self, argv, **kwargs):
            seen.args, self.returncode = argv[3:], seen.code  # argv: python -c CODE, then kplay's arguments

        def communicate(self):
            return seen.out, seen.err

    monkeypatch.setattr(subprocess, "Popen", Child)
    return seen


def load(monkeypatch, line: str) -> str:
    """What `%kplay load LINE` puts in place of its cell."""
    cells = []
    front_end = SimpleNamespace(set_next_input=lambda text, replace: cells.append(text))
    monkeypatch.setattr("IPython.get_ipython", lambda: front_end)
    magic.kplay("load " + line)
    return cells[-1]


def run_cell(child, first: str, body: str) -> tuple[list[str], Path]:
    """A `%%kplay run ...` cell: the arguments its child got, and the folder the cell's source went to."""
    magic.kplay(first.removeprefix("%%kplay "), body)
    return child.args, Path(child.args[1])


def test_a_loaded_cell_holds_the_variants_file_and_runs_it_as_it_was(monkeypatch, child):
    first, body = load(monkeypatch, "sum --variant cpp --device cpu --n 1e6").split("\n", 1)
    assert first == "%%kplay run sum --variant cpp --device cpu --n 1e6" and body == SUM
    args, folder = run_cell(child, first, body)
    assert (folder / "sum.cpp").read_text() == "\n" + SUM and args[-4:] == ["--device", "cpu", "--n", "1e6"]


def test_load_gives_an_exercises_starter_and_names_a_chosen_file(monkeypatch):
    starter = load(monkeypatch, "sum --variant shuffle --starter -p threads=512")
    assert starter.startswith("%%kplay run sum --variant shuffle --param threads=512\n") and "// TODO 1:" in starter
    header = load(monkeypatch, "sum --variant shuffle --file ladder.cuh")
    assert header.startswith("%%kplay run sum --variant shuffle --file ladder.cuh\n")
    with pytest.raises(magic.CellError, match="a kernel name is missing"):
        load(monkeypatch, "")


def test_a_loaded_cell_finds_a_family_from_path_again(tmp_path, monkeypatch, child):
    shutil.copytree(ROOT / "snippets" / "sum", tmp_path / "mine")
    first, body = load(monkeypatch, f"mine --path {tmp_path} --variant cpp --device cpu").split("\n", 1)
    assert first == f"%%kplay run mine --path {tmp_path} --variant cpp --device cpu"
    args, folder = run_cell(child, first, body)
    assert (folder / "sum.cpp").read_text() == "\n" + body and "--path" not in args


@pytest.mark.parametrize("line, message", [
    ("run sum --file", "--file needs a value"),
    ("run sum --variant cpp --file sum.cu", "--file sum.cu: sum/cpp's files are sum.cpp"),
    ("run sum --variant all", "--variant all: the cell holds one variant's source"),
    ("run sum --variant nope", "sum has no variant 'nope'"),
    ("run nosuch", "unknown kernel 'nosuch'"),
    ("run sum --variant cpp --param threads=3", "--param threads=3: valid values are"),
])
def test_bad_cell_options_are_one_line_before_any_child(line, message, child):
    with pytest.raises(magic.CellError, match=re.escape(message)) as failed:
        magic.kplay(line, "int x;")
    assert len(failed.value.lines) == 1 and child.args is None


def test_a_cuda_variants_cell_is_its_cu_file_and_the_rest_are_ejected(child):
    args, folder = run_cell(child, "run sum --variant shuffle -p threads=512 --n 1e6", "// mine\n")
    assert args == ["run", str(folder), "--variant", "shuffle", "--n", "1e6"]
    assert (folder / "sum_shuffle.cu").read_text() == "\n// mine\n" and "TODO" not in (folder / "sum_cuda.cpp").read_text()
    assert (folder / "ladder.cuh").exists() and (folder / "task.toml").exists()
    args, folder = run_cell(child, "run sum --variant shuffle --file=ladder.cuh", "// header\n")
    assert (folder / "ladder.cuh").read_text() == "\n// header\n" and "kplay:todo" in (folder / "sum_shuffle.cu").read_text()


def test_a_failed_check_shows_the_report_then_fails_the_cell(capsys, child):
    child.code, child.out = 1, "variant  check\ncpp      FAIL\n"
    with pytest.raises(magic.CellError) as failed:
        magic.kplay("run sum --variant cpp")
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
        with pytest.raises(magic.CellError, match="^error: interrupted$"):
            magic.kplay("run sum --device cpu --variant cpp --n 1e8")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert started[0].returncode is not None  # ended and waited for: no zombie, no orphan
