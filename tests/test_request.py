"""The request and the spec: validated once, before torch; a family's own sizes; typos named."""

import ast
import json
from pathlib import Path

import pytest

from conftest import ROOT
from playground.family import request, spec
from playground.core.errors import UsageError


def test_a_request_round_trips_through_json():
    req = request.make("lltm", device="cpu", sizes={"batch": "1e3"}, params=["threads=512"], baselines=["eager"])
    back = request.Request.from_json(req.to_json())
    assert back == req and back.sizes == {"batch": 1000, "features": 32, "state": 128}
    assert back.params["threads"] == 512 and back.baselines == ("eager",)


def test_making_a_request_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys; from playground.family import request; request.make('sum', sizes={'n': '1e7'}); "
            "assert 'torch' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("values, dtype, message", [
    ("99999999999,1", "int32", "int32 holds -2,147,483,648 to 2,147,483,647"),
    ("9223372036854775808", "int64", "int64 holds"),
    ("1e40", "float32", "too large for float32"),
    ("-1e39", "float32", "too large for float32"),
    ("4,,2", "int32", "an empty item"),
    ("1.5", "int64", "int64 holds whole numbers only"),
    ("nan", "int32", "whole numbers only"),
    ("abc", "float32", "--values abc: not a number"),
])
def test_a_value_the_dtype_cannot_hold_is_refused(values, dtype, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        request.make("print_array", dtype=dtype, sizes={"values": values})


def test_values_held_approximately_say_so_and_exact_ones_do_not():
    req = request.make("print_array", dtype="float32", sizes={"values": "16777217,0.1,2.5"})
    assert req.sizes["values"] == [16777216.0, pytest.approx(0.1), 2.5] and req.sizes["n"] == 3
    assert req.warnings == ("--values 16777217: float32 holds it as 16777216",)
    big = request.make("print_array", dtype="int64", sizes={"values": "9223372036854775807"})
    assert big.sizes["values"] == [2**63 - 1] and not big.warnings  # exact: never through a float


def test_out_of_range_values_fail_before_any_build(kplay):
    result = kplay("run", "print_array", "--values", "99999999999,1", "--dtype", "int32", "--device", "cpu")
    assert result.exit_code == 2 and "int32 holds" in result.stderr and "compiled" not in result.output


def test_sizes_get_a_did_you_mean(kplay):
    result = kplay("run", "lltm", "--stat", "5", "--device", "cpu")
    assert result.exit_code == 2 and "--stat does not apply to lltm; did you mean --state?" in result.stderr
    typed = kplay("run", "sum", "--size", "m=3")
    assert typed.exit_code == 2 and "--m does not apply to sum" in typed.stderr
    bare = kplay("run", "sum", "--n")
    assert bare.exit_code == 2 and bare.stderr.strip() == "error: --n needs a value, e.g. --n 1000"
    other = kplay("bench", "sum", "--explain")  # a run option, not bench's
    assert other.exit_code == 2 and "--explain is not an option of this command" in other.stderr


@pytest.mark.parametrize("timeout", ["0", "-1"])
def test_a_timeout_must_be_positive(kplay, timeout):
    result = kplay("run", "sum", "--timeout", timeout, "--device", "cpu")
    assert result.exit_code == 2 and "above 0" in result.stderr


def rows_family(folder: Path, spec_text: str | None = None) -> Path:
    """A user family whose only size is called `rows`: nothing in the engine knows that name."""
    folder.mkdir()
    (folder / "task.toml").write_text('summary = "row sums"\nbaselines = ["x.sum(1)"]\n[sizes]\nrows = { default = 100, help = "rows of x" }\n'
                                      '[[test_sizes]]\nrows = 1\n[variants.python]\ndevice = "any"\n')
    (folder / "spec.py").write_text(spec_text or (
        "import torch\n\n"
        "def make_inputs(sizes, dtype, device, gen):\n    return (torch.randn(sizes['rows'], 3, generator=gen, dtype=dtype),)\n\n"
        "def reference(x):\n    return x.double().sum(1)\n\n"
        "def product_tolerance(x):\n    return 0.0\n\n"
        "def tolerance(x, dtype):\n    return 3 * torch.finfo(dtype).eps * x.abs().sum(1).max().item(), '3 roundings'\n\n"
        "def call(ops, variant, x):\n    return x.sum(1)\n\n"
        "BASELINE = 'x.sum(1)'\n\ndef baseline(x):\n    return x.sum(1)\n"))
    return folder


def test_a_family_with_a_size_named_rows_runs_with_no_engine_change(kplay, tmp_path):
    folder = rows_family(tmp_path / "rowsum")
    result = kplay("run", folder, "--rows", "1e5", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    cases = r["variants"][0]["check"]["cases"]  # its test size, three drawn from the seed, the requested one
    assert r["sizes"] == {"rows": 100_000} and cases[0] == "rows=1" and cases[-2:] == ["rows=100000", "rows=100000 reused"]
    assert len(cases) == 6 and all(int(c[5:]) % 32 for c in cases[1:4])
    assert list(r["baselines"]) == ["x.sum(1)"] and r["variants"][0]["speedups"]["x.sum(1)"]["call"]["ratio"] > 0
    assert kplay("run", folder, "--rows=10", "--device", "cpu", "--no-bench").exit_code == 0


def test_run_help_lists_the_family_sizes_and_params(kplay):
    result = kplay("run", "lltm", "--help")
    assert result.exit_code == 0
    for text in ("--batch", "rows in the batch", "--state", "--param threads=", "threads per block"):
        assert text in result.stdout
    shown = kplay("show", "sum")
    assert shown.exit_code == 0 and "--n" in shown.stdout and "number of elements" in shown.stdout


def test_a_spec_without_tolerance_names_the_family_and_the_hook(kplay, tmp_path):
    text = (rows_family(tmp_path / "x") / "spec.py").read_text()
    folder = rows_family(tmp_path / "notol", text.replace("def tolerance(", "def _hidden("))
    result = kplay("run", folder, "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert "rowsum" not in result.stderr and "notol: spec.py has no tolerance(*inputs, dtype)" in result.stderr


@pytest.mark.parametrize("broken, line, says", [("def f(:\n", 1, "invalid syntax"),
                                                  ("import no_such_module\n", 1, "ModuleNotFoundError: No module named"),
                                                  ("x = 1\nraise RuntimeError('boom')\n", 2, "RuntimeError: boom")])
def test_a_spec_that_fails_to_load_is_one_line_with_its_line(kplay, tmp_path, broken, line, says):
    text = (rows_family(tmp_path / "x") / "spec.py").read_text()
    folder = rows_family(tmp_path / "broken", text + broken)
    result = kplay("run", folder, "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert f"spec.py:{text.count(chr(10)) + line}: {says}" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_near_miss_of_a_hook_gets_a_did_you_mean(kplay, tmp_path):
    text = (rows_family(tmp_path / "x") / "spec.py").read_text()
    folder = rows_family(tmp_path / "typo", text.replace("def tolerance(", "def tolerence("))
    result = kplay("run", folder, "--device", "cpu")
    assert result.exit_code == 2 and "defines 'tolerence': did you mean 'tolerance'?" in result.stderr


def test_a_hook_with_the_wrong_signature_is_named():
    class Module:
        __name__ = "m"

    module = Module()
    for name in ("make_inputs", "reference", "tolerance", "call"):
        setattr(module, name, lambda *a: None)
    module.make_inputs = lambda sizes, dtype: None
    module.__dict__.update({k: getattr(module, k) for k in ("make_inputs",)})
    with pytest.raises(UsageError, match=r"make_inputs\(sizes, dtype\) must accept \(sizes, dtype, device, gen\)"):
        spec.from_module("fam", module)


def test_baseline_names_come_from_task_toml_and_are_checked_before_torch():
    """spec.py imports torch: the names it binds are declared in task.toml, so a typo is refused at once."""
    import subprocess
    import sys

    code = ("import sys; from cli import app\ntry: app(['run', 'sum', '--baseline', 'torch.summ'])\n"
            "finally: assert 'torch' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("error: --baseline torch.summ: sum has no such baseline; did you mean 'torch.sum'? "
                                   "it has torch.sum")


def test_no_engine_function_over_40_lines_and_no_command_over_25():
    """The size limits, from the AST's line spans (docstrings count): a command's body at most 25 lines."""
    too_long = []
    for path in [p for p in (ROOT / "playground").rglob("*.py") if "templates" not in p.parts]:
        tree = ast.parse(path.read_text())
        commands = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
                    and any("command" in ast.unparse(d) for d in n.decorator_list)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                body = node.end_lineno - node.body[0].lineno + 1
                if (path.parent.name != "cli" and length > 40) or (node.name in commands and body > 25):
                    too_long.append(f"{path.name}:{node.name} ({length} lines)")
    assert not too_long


def test_half_precision_limits_without_torch():
    assert request.parse_values("65504,0.1", "float16")[0] == [65504.0, pytest.approx(0.1, rel=1e-3)]
    with pytest.raises(UsageError, match="too large for float16"):
        request.parse_values("1e5", "float16")
    assert request.parse_values("257", "bfloat16") == ([256.0], ["--values 257: bfloat16 holds it as 256"])


@pytest.mark.parametrize("name", ["seed", "against", "csv"])  # options of run, and of bench
def test_a_size_may_not_take_the_name_of_an_option(kplay, tmp_path, name):
    folder = rows_family(tmp_path / "clash")
    (folder / "task.toml").write_text((folder / "task.toml").read_text().replace("rows", name))
    result = kplay("run", folder, "--device", "cpu", "--no-bench")
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        f"error: {folder / 'task.toml'}: the size '{name}' has the name of one of kplay's own options (--{name}); "
        "rename it in [sizes]"]
    assert request.make(str(folder)).sizes == {name: 100}  # the engine alone has no options to clash with


def test_auto_picks_the_cpu_for_a_run_with_nothing_for_the_gpu(monkeypatch):
    import torch

    from playground.family import registry

    from playground.run import runner

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    sum_ = registry.find("sum")
    assert runner.resolve_device("auto", sum_, None) == "cuda"
    assert runner.resolve_device("auto", sum_, "cpp") == "cpu"  # a CPU variant, on a GPU machine
    assert runner.resolve_device("auto", registry.find("sum"), "fast") == "cuda"


def test_integers_above_2_53_are_compared_exactly():
    import torch

    from playground.run.check import compare

    ref = torch.tensor([2**53 + 1], dtype=torch.int64)
    assert not compare(torch.tensor([2**53], dtype=torch.int64), ref, 0.0, "exact").ok
    assert compare(ref.clone(), ref, 0.0, "exact").ok


def test_helpers_near_a_short_hook_are_not_typos():
    class Module:
        __name__ = "m"

    module = Module()
    for name in ("make_inputs", "reference", "tolerance", "call"):
        setattr(module, name, lambda *a: None)
    module.make_inputs = lambda sizes, dtype, device, gen: None

    def extract(x):
        return x

    extract.__module__ = "m"
    module.extract, module.flags = extract, [1]
    assert spec.from_module("fam", module).extra is not None  # 'extract' and 'flags' are helpers, not typos
    with pytest.raises(UsageError, match="values"):
        request.parse_values("sNaN", "float32")


def test_every_failing_case_shows_its_first_line_within_the_cap():
    """Seen on the H200: four cases of value lines pushed the reused case's diagnosis ('another stream?') past the
    five lines kept, so the student saw only numbers. Each failing case's first line stays, in order."""
    from playground.core.record import Check
    from playground.run.check import MAX_MISMATCHES, failed, merge

    noisy = Check(False, 1.0, 0.0, "", [f"n=1: out[{i}]: got 1, expected 0" for i in range(MAX_MISMATCHES)], ["n=1"])
    reused = Check(False, 1.0, 0.0, "", ["n=9 reused: work still running on another stream?", "n=9 reused: out[]: got 2"],
                   ["n=9 reused"])
    shown = merge([noisy, failed("passes", case="n=5"), reused]).mismatches
    assert len(shown) == MAX_MISMATCHES and shown[0] == "n=1: out[0]: got 1, expected 0"
    assert shown[-2:] == ["n=5: passes", "n=9 reused: work still running on another stream?"]
    assert merge([noisy]).mismatches == noisy.mismatches


def test_an_output_that_changes_after_its_stream_finished_is_named():
    """On a GPU, the check reads each output in stream order, then again once the whole device has finished:
    work on another stream (sum/fast_event_too_early) changes it in between, and the case says so."""
    import torch

    from playground.run import check

    done = torch.tensor([1.0, float("nan")])
    assert not check.moved(done.clone(), done) and not check.moved((done.clone(),), (done, 3))
    assert check.moved(torch.tensor([0.0, float("nan")]), done)  # read before the side stream's kernel wrote it
    assert check.moved(torch.zeros(3), torch.zeros(2)) and "another stream" in check.LATE


def test_a_size_above_the_familys_cap_is_refused_and_eject_keeps_the_cap(kplay, tmp_path):
    result = kplay("run", "print_array", "--n", "1e9", "--device", "cpu")
    assert result.exit_code == 2 and "--n 1e9: above print_array's largest n, 1,000,000" in result.stderr
    many = kplay("run", "print_array", "--values", ",".join(["1"] * 1_000_001), "--device", "cpu")
    assert many.exit_code == 2 and "--values: more than print_array's largest n, 1,000,000" in many.stderr
    assert "(at most 1,000,000)" in " ".join(kplay("show", "print_array").stdout.split())  # as one line: it may wrap
    assert kplay("eject", "print_array", tmp_path / "pa").exit_code == 0
    again = kplay("run", tmp_path / "pa", "--n", "1000001", "--device", "cpu")
    assert again.exit_code == 2 and "above print_array's largest n" in again.stderr
