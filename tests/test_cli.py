"""Every command through the CLI, the JSON output, and bad input: one line and the documented exit code."""

import json
import re

import pytest

from conftest import ROOT, gpu


def test_list_names_every_family(kplay):
    result = kplay("list", "--json")
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert {"sum", "print_array"} <= set(rows)
    assert "cpp" in rows["sum"]["variants"] and "cpu" in rows["sum"]["devices"]
    table = kplay("list")
    assert table.exit_code == 0 and "print_array" in table.stdout


def test_list_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys; from cli import app; app(['list'], standalone_mode=False); assert 'torch' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(__import__("conftest").ROOT))
    assert done.returncode == 0, done.stderr


def test_show_prints_note_and_source(kplay):
    result = kplay("show", "sum")
    assert result.exit_code == 0
    assert "STABLE_TORCH_LIBRARY" in result.stdout and "Reduction" in result.stdout
    named = kplay("show", "sum", "--variant", "fast")  # a CUDA variant's source, on a machine without a GPU
    assert named.exit_code == 0 and "sum_fast.cu" in named.stdout and "__global__" in named.stdout, named.output


def test_run_sum_json_matches_the_table(kplay):
    result = kplay("run", "sum", "--n", "1e5", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    v = r["variants"][0]
    assert r["ok"] and r["sizes"] == {"n": 100_000} and v["check"]["ok"]
    assert v["check"]["cases"][-6:] == [
        "n=100000 randn", *(f"n=100000 randn {form}" for form in ("2-D", "strided", "misaligned")),
        "n=100000 uniform probed", "n=100000 randn reused"] and any(c.startswith("n=1025 ") for c in v["check"]["cases"])
    assert v["time"]["samples"] >= 30 and v["time"]["q1_s"] <= v["time"]["median_s"] <= v["time"]["q3_s"]
    assert v["gbps"] == pytest.approx(100_000 * 4 / v["time"]["median_s"] / 1e9)
    assert v["speedup"] == pytest.approx(r["baselines"]["torch.sum"]["time"]["median_s"] / v["time"]["median_s"])
    table = kplay("run", "sum", "--n", "1e5", "--device", "cpu")
    assert table.exit_code == 0 and "PASS" in table.stdout and "torch.sum" in table.stdout


def test_run_print_array_shows_what_cpp_printed(kplay):
    result = kplay("run", "print_array", "--values", "4,3,2,1", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "4\n" in result.stdout and "PASS" in result.stdout
    assert "checked at n=4\n" in result.stdout and "tolerance: exact: an integer prints exactly" in result.stdout
    floats = kplay("run", "print_array", "--values", "0.5", "--dtype", "float64", "--device", "cpu")
    assert "tolerance: exact: %.17g round-trips float64" in floats.stdout, floats.output


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_print_array_round_trips_every_dtype(kplay, dtype):
    result = kplay("run", "print_array", "--n", "100", "--dtype", dtype, "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["variants"][0]["check"]["max_abs_err"] == 0
    assert len(r["variants"][0]["stdout"].split()) == 100


@pytest.mark.parametrize("args, message", [
    (["--n", "0"], "--n 0: must be at least 1"),
    (["--n", "-5"], "--n -5: must be at least 1"),
    (["--n", "abc"], "--n abc: not a number"),
    (["--n", "1e99"], "too large"),
    (["--n", "2.5"], "whole number"),
    (["--param", "nope=1"], "no parameter 'nope'"),
    (["--dtype", "float8"], "--dtype float8"),
    (["--dtype", "int32"], "sum takes float32, float64"),
    (["--batch", "4"], "--batch does not apply to sum"),
    (["--variant", "nope", "--device", "cpu"], "no cpu variant 'nope'"),
])
def test_bad_input_is_one_line_exit_2(kplay, args, message):
    result = kplay("run", "sum", *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_unknown_kernel_suggests_the_closest(kplay):
    result = kplay("run", "summ")
    assert result.exit_code == 2 and "did you mean 'sum'?" in result.stderr


def test_print_array_rejects_fractions_for_int_dtypes(kplay):
    result = kplay("run", "print_array", "--values", "1.5,2", "--dtype", "int32", "--device", "cpu")
    assert result.exit_code == 2 and "--values 1.5: int32 holds whole numbers only" in result.stderr


@pytest.mark.skipif(gpu(), reason="this machine has a GPU")
def test_cuda_without_gpu_is_a_usage_error(kplay):
    result = kplay("run", "sum", "--device", "cuda", "--n", "100")
    assert result.exit_code == 2 and "no CUDA GPU" in result.stderr
    assert len(result.stderr.splitlines()) == 1  # found after the progress display started: no stray line


def test_doctor_reports_each_part(kplay):
    result = kplay("doctor")
    for part in ("python", "torch", "ninja", "C++ compiler", "build cache"):
        assert part in result.stdout
    assert result.exit_code == 0, result.stdout


def test_doctor_on_a_gpu_less_machine_with_a_cuda_build_names_the_cpu_build(kplay, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    said = " ".join(kplay("doctor").stdout.split())
    assert "the CPU build would do" in said and "--index-url https://download.pytorch.org/whl/cpu" in said, said
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "the CPU build would do" not in " ".join(kplay("doctor").stdout.split())


def test_clean_empties_the_cache(kplay, own_cache):
    assert kplay("run", "sum", "--n", "100", "--device", "cpu").exit_code == 0
    assert any(own_cache.iterdir())
    result = kplay("clean")
    assert result.exit_code == 0 and "removed" in result.stdout
    assert [p.name for p in own_cache.iterdir()] == [".kplay-cache.lock"]  # the lock stays: builds may wait on it


def test_values_only_where_the_family_takes_them(kplay):
    result = kplay("run", "sum", "--values", "1,2,3")
    assert result.exit_code == 2 and "--values does not apply to sum" in result.stderr


def test_nan_values_are_not_a_changed_input(kplay):
    result = kplay("run", "print_array", "--values", "1,nan,3", "--dtype", "float32", "--device", "cpu")
    assert result.exit_code == 0, result.output


def test_a_path_that_is_a_file_is_one_line(kplay):
    result = kplay("run", "snippets/sum/sum.cpp")
    assert result.exit_code == 2 and "not a kernel folder" in result.stderr and "Traceback" not in result.output


def test_typer_usage_errors_are_one_line_exit_2(kplay):
    for args, text in ((["run", "sum", "--device", "gpu"], "'gpu' is not one of"), (["show"], "Missing argument"),
                       (["run", "sum", "--timeoutt", "3"], "--timeoutt does not apply to sum; did you mean --timeout?"),
                       (["list", "--nope"], "No such option: --nope"),
                       (["run"], "kplay run: missing the kernel's NAME"), (["profile"], "kplay profile: missing"),
                       (["bench", "lltm", "--no-bench"], "--no-bench is not an option of this command")):
        result = kplay(*args)
        assert result.exit_code == 2, (args, result.output)
        assert text in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "╭" not in result.output and "Traceback" not in result.output


def test_plain_kplay_shows_the_help_and_exits_0_and_version_works(kplay):
    result = kplay()
    assert result.exit_code == 0 and "run" in result.stdout and "bench" in result.stdout
    assert result.stdout.count("Usage:") == 1, result.stdout  # once, not twice
    version = kplay("--version")
    assert version.exit_code == 0 and version.stdout.startswith("kplay ")


def test_kplay_debug_shows_the_traceback_and_keeps_the_exit_code(kplay, monkeypatch):
    monkeypatch.setenv("KPLAY_DEBUG", "1")
    result = kplay("run", "sum", "--n", "abc")
    assert result.exit_code == 2 and "Traceback" in result.stderr and "--n abc: not a number" in result.stderr


def test_small_messages(kplay, tmp_path):
    assert "sum takes float32, float64" in kplay("run", "sum", "--dtype", "float7").stderr
    assert "but" not in kplay("run", "sum", "--dtype", "float7").stderr
    missing = kplay("run", tmp_path / "nowhere")
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    if not gpu():
        tree = kplay("run", "sum", "--variant", "tree", "--n", "100")
        assert tree.exit_code == 2 and "sum/tree is a cuda variant and this run is on cpu" in tree.stderr


def test_a_param_no_variant_uses_is_a_warning_and_reports_show_only_params_in_play(kplay):
    result = kplay("run", "sum", "--device", "cpu", "--n", "100", "--param", "threads=512", "--no-bench", "--json")
    r = json.loads(result.stdout)
    assert result.exit_code == 0 and r["params"] == {} and r["warnings"] == ["--param threads: no chosen variant uses it"]
    lltm = json.loads(kplay("run", "lltm", "--device", "cpu", "--no-bench", "--json").stdout)
    assert lltm["params"] == {}  # fwd_split, bwd_split, streams and threads are cuda-fast's and cuda's


def test_a_family_shadowing_a_built_in_gets_a_warning(kplay, tmp_path):
    import shutil

    shutil.copytree(ROOT / "snippets" / "sum", tmp_path / "sum")
    result = kplay("run", "sum", "--path", tmp_path, "--device", "cpu", "--n", "100", "--no-bench", "--json")
    warnings = json.loads(result.stdout)["warnings"]
    assert result.exit_code == 0 and warnings == [f"sum from {tmp_path / 'sum'} has the name of a built-in family; "
                                                  f"this run uses {tmp_path / 'sum'}"]
    listed = kplay("list", "--path", tmp_path)
    assert listed.exit_code == 0 and f"warning: sum from {tmp_path / 'sum'} hides the built-in sum" in listed.stderr
    assert "hides" not in kplay("list").stderr


def test_path_to_a_missing_folder_warns_and_a_familys_own_folder_works(kplay, tmp_path, monkeypatch):
    import shutil

    missing = kplay("list", "--path", tmp_path / "nonexist")
    assert missing.exit_code == 0 and f"warning: --path {tmp_path / 'nonexist'}: no such folder" in missing.stderr
    shutil.copytree(ROOT / "snippets" / "print_array", tmp_path / "myfam")  # a family is named by its folder
    assert "myfam" in kplay("list", "--path", tmp_path / "myfam").stdout  # the family's own folder, as --path
    ran = kplay("run", "myfam", "--path", tmp_path / "myfam", "--values", "1,2", "--no-bench")
    assert ran.exit_code == 0, ran.output
    monkeypatch.chdir(tmp_path)  # its folder here, named as a family: how to run it
    bare = kplay("run", "myfam")
    assert bare.exit_code == 2 and "the folder myfam here holds one: give it as a path, ./myfam" in bare.stderr


@pytest.mark.parametrize("command", ["list", "show", "run", "bench", "profile", "eject", "export", "start", "check",
                                     "hint", "board", "clean", "doctor", "pool start", "pool add-student",
                                     "pool join", "pool status"])
def test_help_placeholders_are_words_and_a_flag_has_none(kplay, command):
    shown = kplay(*command.split(), "--help")
    assert shown.exit_code == 0, shown.output
    typed = re.findall(r"<(?:bool|int|float|str|path|list\[\w+\])>|\b(?:TEXT|INTEGER|FLOAT|PATH|BOOLEAN)\b",
                       shown.output)  # typer >= 0.20's placeholders, and older typer's
    assert not typed, (typed, shown.output)
    assert " NAME " not in shown.output.split("--dir", 1)[-1][:30]  # --dir DIR, not the fallback


def test_integer_options_take_what_sizes_take(kplay):
    for written, seed in [("1e3", 1000), ("10_000", 10000), ("7", 7)]:
        result = kplay("run", "sum", "--n", "100", "--no-bench", "--json", "--seed", written)
        assert result.exit_code == 0 and json.loads(result.stdout)["seed"] == seed, result.output
    for bad in ("1.5", "abc", "1e99"):
        result = kplay("run", "sum", "--n", "100", "--seed", bad)
        assert result.exit_code == 2 and f"'{bad}' is not a whole number (1000, 1e3 and 1_000 are)" in result.stderr


def test_a_cpp_check_names_the_students_file_and_line(kplay, tmp_path):
    import shutil

    folder = tmp_path / "mysum"
    shutil.copytree(ROOT / "snippets" / "sum", folder)
    source = folder / "sum.cpp"
    text = source.read_text().replace('STD_TORCH_CHECK(x.is_cpu(), "sum (C++): x must be on the CPU");',
                                      'STD_TORCH_CHECK(x.numel() != 2, "sum (C++): no pairs, please");')
    source.write_text(text)
    line = text.splitlines().index(next(ln for ln in text.splitlines() if "no pairs" in ln)) + 1
    result = kplay("run", folder, "--device", "cpu", "--n", "100", "--no-bench")
    assert result.exit_code == 4 and f"no pairs, please ({source}:{line})" in result.stderr, result.stderr
