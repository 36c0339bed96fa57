"""Bad input that once ended in a traceback or the wrong exit code: each is one line and exit 2 now."""

import shutil

import pytest

from conftest import ROOT


def broken_sum(tmp_path, how: str):
    """A copy of sum (its C++ variant) broken in one way."""
    folder = tmp_path / how
    shutil.copytree(ROOT / "snippets" / "sum", folder, ignore=shutil.ignore_patterns("__pycache__"))
    if how == "reference-raises":
        spec = folder / "spec.py"
        spec.write_text(spec.read_text().replace("def reference(x):\n", "def reference(x):\n    raise ValueError('oops')\n"))
    if how == "empty-source":
        (folder / "sum.cpp").write_text("\n")
    return folder


@pytest.mark.parametrize("args, says", [
    (["run", "sum", "--seed", "99999999999999999999"], "--seed 99999999999999999999: give a whole number from 0 to 2^62"),
    (["run", "sum", "--seed", "-1"], "--seed -1: give a whole number"),
    (["run", "sum", "--timeout", "1e20"], "--timeout 1e+20: give a number of seconds above 0, at most 86,400"),
    (["run", "sum", "--size", "n=5", "--n", "6"], "--n is given twice"),
    (["bench", "sum", "--sizes", ""], "--sizes: give the sizes to sweep"),
    (["export", "sum", "/dev/null"], "/dev/null: cannot write there (/dev/null is not a folder)"),
    (["eject", "sum", "/proc/kplay-x"], "/proc/kplay-x: cannot write there"),
])
def test_a_bad_option_or_target_is_one_line_and_exit_2(kplay, args, says):
    result = kplay(*args, "--device", "cpu") if args[0] in ("run", "bench") else kplay(*args)
    assert result.exit_code == 2, result.output
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["eject", "export"])
def test_a_target_that_is_a_file_is_refused_and_kept(kplay, tmp_path, command):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    result = kplay(command, "sum", target)
    assert result.exit_code == 2 and f"{target}: cannot write there ({target} is not a folder)" in result.stderr
    assert target.read_text() == "mine"


@pytest.mark.parametrize("how, says", [("reference-raises", "spec.py:"), ("empty-source", "sum.cpp is empty")])
def test_a_broken_family_is_one_line_and_exit_2(kplay, tmp_path, how, says):
    result = kplay("run", broken_sum(tmp_path, how), "--variant", "cpp", "--device", "cpu", "--n", "100", "--no-bench")
    assert result.exit_code == 2, result.output
    assert says in result.stderr and "Traceback" not in result.output
    if how == "reference-raises":
        assert "reference raised ValueError: oops" in result.stderr


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_timeout_bounds_one_call_of_the_kernel_not_the_whole_run(kplay, dtype):
    """A call at 1e7 takes a few ms; the reference, the tolerance, the copies and the inputs around each case
    take hundreds (0.28 s once counted against a 0.5 s timeout): only the call counts. (0.5 s, not less: on a
    2-core box busy with other builds, one call once waited past a fraction of a second for a core.)"""
    result = kplay("run", "sum", "--device", "cpu", "--n", "1e7", "--timeout", "0.5", "--dtype", dtype)
    assert result.exit_code == 0, result.output


def test_check_takes_the_same_timeout_as_run(kplay, tmp_path):
    assert kplay("start", "print_array/cpp", tmp_path / "me").exit_code == 0
    result = kplay("check", tmp_path / "me", "--device", "cpu", "--timeout", "1e20")
    assert result.exit_code == 2 and "--timeout 1e+20: give a number of seconds above 0, at most 86,400" in result.stderr
    assert "one call of the kernel" in " ".join(kplay("check", "--help").output.split())


@pytest.mark.parametrize("budget", ["0", "-1", "soon", "1e9"])
def test_a_timing_budget_out_of_range_is_one_line(kplay, monkeypatch, budget):
    monkeypatch.setenv("KPLAY_BUDGET_S", budget)
    result = kplay("run", "sum", "--n", "1e3", "--device", "cpu")
    assert result.exit_code == 2 and f"KPLAY_BUDGET_S={budget}: give seconds of timing per contender" in result.output
