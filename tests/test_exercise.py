"""Exercises made from solutions: the markers, start → check fails → hint → fix → check passes, show/eject."""

import json
import re
import shlex
import shutil

import pytest

from conftest import ROOT
from playground.workshop import exercise, folder as started, todos as markers
from playground.family import registry
from playground.core.errors import UsageError

TAIL = "  for (; i < end; ++i) total += x[i];\n"
MARKED_TAIL = ("  // kplay:todo Add the tail: the elements after the last whole row of lanes, one by one.\n"
               "  // kplay:why n is rarely a multiple of kLanes: without the tail, n = 1, 31 or 1025 sum wrong.\n"
               + TAIL + "  // kplay:end\n")


def _family(tmp_path, old: str, new: str):
    """A copy of sum whose sum.cpp has `old` replaced by `new`, its main size small (a quick check)."""
    folder = tmp_path / "mysum"
    shutil.copytree(ROOT / "snippets" / "sum", folder, ignore=shutil.ignore_patterns("__pycache__"))
    cpp = folder / "sum.cpp"
    solution = "".join(line for line in cpp.read_text().splitlines(keepends=True) if "// kplay:" not in line)
    assert solution.count(old) == 1
    cpp.write_text(solution.replace(old, new))
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("default = 10_000_000", "default = 100_000"))
    return folder


def test_strip_numbers_todos_keeps_stubs_and_reads_why():
    text = ("int f() {\n  // kplay:todo Return the answer.\n  // kplay:why It is 42.\n  return 42;\n"
            "  // kplay:stub\n  // return 0;\n  // kplay:end\n}\n"
            "// kplay:todo Second.\nint g = 1;\n// kplay:end\n")
    starter, hints = markers.strip(text, "x.cpp", first=3)
    assert starter == "int f() {\n  // TODO 3: Return the answer.\n  return 0;\n}\n// TODO 4: Second.\n"
    assert [(h.number, h.line, h.what, h.why) for h in hints] == [(3, 2, "Return the answer.", "It is 42."),
                                                                 (4, 5, "Second.", "")]  # the starter's lines


def test_a_hints_code_is_its_own_field_and_fills_its_todo_on_request():
    text = ("int f() {\n  // kplay:todo Return the answer.\n  // kplay:code return 6 * 7;\n  // kplay:code // (so)\n"
            "  return 42;\n  // kplay:stub\n  // return 0;\n  // kplay:end\n}\n")
    starter, hints = markers.strip(text, "x.cpp")
    assert starter == "int f() {\n  // TODO 1: Return the answer.\n  return 0;\n}\n"
    assert hints[0].code == "return 6 * 7;\n// (so)"
    filled, _ = markers.strip(text, "x.cpp", fill={1: hints[0].code})
    assert filled == "int f() {\n  // TODO 1: Return the answer.\n  return 6 * 7;\n  // (so)\n}\n"
    assert markers.strip(text, "x.cpp", fill={1: "return 7;"})[0] == "int f() {\n  // TODO 1: Return the answer.\n  return 7;\n}\n"


def test_a_started_folders_hints_point_at_its_todos_and_give_code_apart(kplay, tmp_path):
    """The hint lines in the started task.toml are the starter's, and a hint with code shows it under `code:`."""
    assert kplay("start", "sum/cpp", tmp_path / "me").exit_code == 0
    table = registry.tomllib.loads((tmp_path / "me" / "task.toml").read_text())["exercise"]
    for h in table["hints"]:
        line = (tmp_path / "me" / h["file"]).read_text().splitlines()[h["line"] - 1]
        assert f"// TODO {h['number']}: {h['what']}" in line, (h, line)
    coded = [h for h in table["hints"] if h.get("code")]
    assert coded and "(" not in coded[0]["what"]  # the prose says what; the code is its own field
    shown = kplay("hint", tmp_path / "me", str(coded[0]["number"]))
    assert shown.exit_code == 0 and "  code:\n    torch::stable::parallel_for(0, chunks, 1," in shown.output, shown.output
    assert "`kplay check .`" in (tmp_path / "me" / "task.toml").read_text().splitlines()[0]


@pytest.mark.parametrize("text, message", [
    ("a;\n// kplay:todo Do it.\nb;\n", "x.cu:2: // kplay:todo without its // kplay:end"),
    ("// kplay:end\n", "x.cu:1: // kplay:end outside a // kplay:todo region"),
    ("// kplay:todo A.\n// kplay:todo B.\n// kplay:end\n", "x.cu:2: // kplay:todo inside the region opened at line 1"),
    ("// kplay:todo A.\nx;\n// kplay:end\n// kplay:todo B.\n// kplay:todo C.\n",  # the solution's lines, not the starter's
     "x.cu:5: // kplay:todo inside the region opened at line 4"),
    ("// kplay:todo\n// kplay:end\n", "x.cu:1: // kplay:todo needs its hint"),
    ("// kplay:tood A.\n", "x.cu:1: unknown marker // kplay:tood"),
])
def test_a_broken_marking_names_file_and_line(text, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        markers.strip(text, "x.cu")


def test_cli_refuses_a_region_without_its_end_in_one_line(kplay, tmp_path):
    folder = _family(tmp_path, TAIL, MARKED_TAIL.replace("  // kplay:end\n", ""))
    result = kplay("start", f"{folder}/cpp", tmp_path / "student")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"{folder / 'sum.cpp'}:" in result.output and "without its // kplay:end" in result.output
    assert not (tmp_path / "student").exists()


def test_a_marking_that_breaks_the_build_is_one_line_exit_2_and_writes_nothing(kplay, tmp_path):
    # The region takes sum_all's declaration line away: the starter cannot compile.
    old = "double sum_all(const T* x, int64_t n) {\n"
    folder = _family(tmp_path, old, f"// kplay:todo Declare sum_all.\n{old}// kplay:end\n")
    result = kplay("start", f"{folder}/cpp", tmp_path / "student")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "the starter of mysum/cpp does not compile" in result.output and "starter's line sum.cpp:" in result.output
    assert not (tmp_path / "student").exists()


def test_start_check_hint_fix_check(kplay, tmp_path):
    """The student's loop on a CPU exercise: the starter fails, a hint, the fix, then all cases pass with a speedup."""
    folder = _family(tmp_path, TAIL, MARKED_TAIL)
    student = tmp_path / "student"
    result = kplay("start", f"{folder}/cpp", student)
    assert result.exit_code == 0, result.output
    source = (student / "sum.cpp").read_text()
    assert "  // TODO 1: Add the tail: the elements after the last whole row of lanes, one by one.\n" in source
    assert "kplay:" not in source and TAIL not in source

    result = kplay("check", student, "--device", "cpu", "--json", "--name", "ada", "--seed", 0)
    rec = json.loads(result.stdout)
    assert result.exit_code == 1 and rec["exit_code"] == 1 and rec["seed"] == 0, result.output
    assert (rec["student"], rec["family"], rec["variant"]) == ("ada", "mysum", "cpp")
    # n = 100000 (in each of its forms) and 256 are whole rows of lanes in every chunk: 7 cases pass in each dtype,
    # and in float32 also n = 1025 drawn from `magnitudes` (its one lost element within the tolerance of a float32
    # sum of values up to 1e3); the other test sizes, and the drawn ones (never a multiple of 32), fail.
    assert [(d["dtype"], d["passed"], d["checked"]) for d in rec["dtypes"]] == [("float32", 8, 19), ("float64", 7, 19)]
    assert rec["failures"] == {"wrong value": 23} and rec["checked"] == 38 and rec["passed"] == 15, rec
    assert rec["speedup"] is None and rec["run"]["variants"][0]["check"]["ok"] is False
    assert rec["run"]["variants"][0]["time"] is None and not rec["run"]["baselines"]  # a wrong kernel is not timed
    shown = kplay("check", student, "--device", "cpu", "--seed", 0)
    assert shown.exit_code == 1 and "15/38 cases passed (23 wrong value)" in shown.output, shown.output
    assert re.search(r"✗ cpp: n=1 \S+: out\[\]: got ", shown.output) and "kept from another call" not in shown.output
    assert "cpp: not timed, as it failed the check" in shown.output and rec["run"]["not_timed"] == ["cpp"]

    hint = kplay("hint", student)
    assert hint.exit_code == 0 and "hint 1/1 · TODO 1 in sum.cpp" in hint.output
    assert "n is rarely a multiple of kLanes" in hint.output
    assert json.loads((student / started.HINTS_FILE).read_text()) == {"shown": 1}
    assert "no more hints: all 1 shown" in kplay("hint", student).output

    (student / "sum.cpp").write_text(source.replace(source.splitlines(keepends=True)[
        next(k for k, line in enumerate(source.splitlines()) if "TODO 1" in line)], TAIL))
    result = kplay("check", student, "--device", "cpu", "--json")
    rec = json.loads(result.stdout)
    assert result.exit_code == 0 and rec["passed"] == rec["checked"] == 38 and rec["failures"] == {}, rec
    assert rec["speedup"] > 0 and rec["baseline"] == "torch.sum" and rec["student"] == started.student(student)
    assert exercise.score(rec) == (f"all 38 cases passed · same as torch.sum ({rec['speedup']:.2f}×, within the noise)"
                                   if rec["speedup_same"] else f"all 38 cases passed · {rec['speedup']:.2f}× torch.sum")
    assert "float64: all 19 cases passed" in kplay("check", student, "--device", "cpu").output


@pytest.mark.nvcc
@pytest.mark.slow  # the lltm/cuda starter's compile: test_every_built_in_starter_compiles[lltm/cuda] builds it too
def test_start_with_a_family_name_alone_on_a_gpu_machine_takes_a_gpu_exercise(kplay, tmp_path, monkeypatch):
    """lltm's default variant is "all": on a GPU machine `kplay start lltm DIR` takes cuda, its CUDA exercise."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert kplay("start", "lltm", tmp_path / "me").exit_code == 0
    assert "TODO 1: Activate the three gates" in (tmp_path / "me" / "lltm_cuda.cu").read_text()


def test_start_with_a_family_name_alone_on_a_laptop_takes_its_cpu_exercise(kplay, tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    result = kplay("start", "sum", tmp_path / "me")
    assert result.exit_code == 0, result.output
    assert "started sum/cpp: fill in the TODOs" in result.stdout and "warning" not in result.stderr
    assert "--pool" not in result.stdout
    assert registry.load_family(tmp_path / "me").exercise["variant"] == "cpp"
    assert "TODO 3: Sum the chunks in parallel" in (tmp_path / "me" / "sum.cpp").read_text()


def test_a_family_whose_exercises_all_need_a_gpu_says_which(kplay, tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    folder = tmp_path / "gpuonly"
    shutil.copytree(ROOT / "snippets" / "sum", folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "sum.cpp").write_text("".join(
        line for line in (folder / "sum.cpp").read_text().splitlines(keepends=True) if "// kplay:" not in line))
    result = kplay("start", folder, tmp_path / "me")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "gpuonly's exercises need a GPU (gpuonly/tree, gpuonly/first-add, gpuonly/shuffle, gpuonly/fast)" in result.output


def test_list_marks_the_variants_that_are_exercises(kplay):
    rows = {r["name"]: r for r in json.loads(kplay("list", "--json").stdout)}
    assert rows["sum"]["exercises"] == ["cpp", *RUNGS] and rows["lltm"]["exercises"] == ["cpp", "cuda"]
    assert rows["print_array"]["exercises"] == ["cpp"] and rows["linear"]["exercises"] == ["cpp", *LINEAR_RUNGS]
    table = kplay("list").stdout
    assert "cpp*, cuda*, cuda-fast" in table and "* an exercise: kplay start NAME/VARIANT DIR" in table


def test_an_int32_only_print_array_answer_fails_check(kplay, tmp_path):
    """The dtype dispatch is what print_array teaches: every dtype the family declares is graded."""
    assert kplay("start", "print_array/cpp", tmp_path / "lazy").exit_code == 0
    cpp = tmp_path / "lazy" / "print_array.cpp"
    lazy = ('    case ScalarType::Int: print_values<int32_t>(c, "%" PRId32 "\\n"); break;\n'
            '    case ScalarType::Long: case ScalarType::Float: case ScalarType::Double:\n      break;\n')
    text = cpp.read_text()
    stub = text[text.index("    case ScalarType::Int: case"):text.index("    default:")]
    cpp.write_text(text.replace(stub, lazy))
    result = kplay("check", tmp_path / "lazy", "--json", "--seed", 0)
    rec = json.loads(result.stdout)
    assert result.exit_code == 1, result.output
    assert [(d["dtype"], d["passed"] == d["checked"]) for d in rec["dtypes"]] == [
        ("int32", True), ("int64", False), ("float32", False), ("float64", False)]
    assert rec["passed"] == 9 and rec["checked"] == 36, rec  # 6 cases and 3 drawn sizes per dtype


def test_a_variant_takes_its_own_dtypes_and_check_grades_only_those(kplay, tmp_path):
    folder = tmp_path / "mysum"
    shutil.copytree(ROOT / "snippets" / "sum", folder, ignore=shutil.ignore_patterns("__pycache__"))
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace('sources = ["sum.cpp"]', 'sources = ["sum.cpp"]\ndtypes = ["float64"]', 1))
    fam = registry.load_family(folder)
    assert exercise.graded(fam, fam.variants["cpp"]) == ["float64"]
    assert exercise.graded(fam, fam.variants["tree"]) == ["float32", "float64"]
    refused = kplay("run", folder, "--variant", "cpp", "--dtype", "float32")
    assert refused.exit_code == 2 and "mysum/cpp takes float64, not float32" in refused.stderr, refused.output
    ran = kplay("run", folder, "--variant", "cpp", "--n", "1000", "--no-bench", "--json")  # its own first dtype
    assert ran.exit_code == 0 and json.loads(ran.stdout)["dtype"] == "float64", ran.output
    # --variant all and no --dtype: each variant in its own first dtype, a run per dtype (--json: the first
    # record holds the others); the two runs' tables one after the other
    toml.write_text(toml.read_text() + '\n[variants.cpp32]\ndevice = "cpu"\nsources = ["sum.cpp"]\ndtypes = ["float32"]\n')
    both = kplay("run", folder, "--variant", "all", "--device", "cpu", "--n", "1000", "--no-bench", "--json")
    rec = json.loads(both.stdout)
    assert both.exit_code == 0 and (rec["dtype"], [v["variant"] for v in rec["variants"]]) == ("float32", ["cpp32"])
    assert [(r["dtype"], [v["variant"] for v in r["variants"]]) for r in rec["other_runs"]] == [("float64", ["cpp"])]
    shown = kplay("run", folder, "--variant", "all", "--device", "cpu", "--n", "1000", "--no-bench").stdout
    assert shown.index("mysum · cpu · float32") < shown.index("mysum · cpu · float64"), shown
    one = kplay("run", folder, "--variant", "all", "--device", "cpu", "--dtype", "float64", "--no-bench", "--json")
    assert [v["variant"] for v in json.loads(one.stdout)["variants"]] == ["cpp"] and "other_runs" not in one.stdout
    assert rec["all_ok"] is True and rec["all_exit_code"] == 0, rec  # the verdict of every run
    # --against an earlier record: each run compared with that record's run in its dtype
    (tmp_path / "before.json").write_text(kplay("run", folder, "--variant", "all", "--device", "cpu", "--n", "1000",
                                                "--json").stdout)
    again = kplay("run", folder, "--variant", "all", "--device", "cpu", "--n", "1000", "--against", tmp_path / "before.json")
    assert again.exit_code == 0 and again.stdout.count("against before") == 2, again.output  # a table per run
    again = json.loads(kplay("run", folder, "--variant", "all", "--device", "cpu", "--n", "1000", "--json",
                             "--against", tmp_path / "before.json").stdout)
    assert [c["name"] for c in again["other_runs"][0]["against"]["contenders"]] == ["cpp", "torch.sum"], again
    # a --param a later run's variant uses is no 'unused' warning in the first run; one no run uses is one line
    warned = lambda r: " ".join(r.output.split()).count("--param threads: no chosen variant uses it")  # noqa: E731
    idle = kplay("run", folder, "--variant", "all", "--device", "cpu", "--n", "1000", "--no-bench", "--param", "threads=128")
    assert idle.exit_code == 0 and warned(idle) == 1, idle.output
    (folder / "sum64.cpp").write_text((folder / "sum.cpp").read_text() + "\n// {{threads}} threads: this test's\n")
    toml.write_text(toml.read_text().replace('sources = ["sum.cpp"]\ndtypes = ["float64"]', 'sources = ["sum64.cpp"]\ndtypes = ["float64"]', 1))
    used = kplay("run", folder, "--variant", "all", "--device", "cpu", "--n", "1000", "--no-bench", "--param", "threads=128")
    assert used.exit_code == 0 and warned(used) == 0, used.output
    toml.write_text(toml.read_text().replace('sources = ["sum64.cpp"]', 'sources = ["sum.cpp"]', 1))
    # a follow-on run that fails keeps the table before it, and its own error is one line; the pool keeps the flag
    (folder / "broken.cpp").write_text("this is not C++\n")
    toml.write_text(toml.read_text().replace('sources = ["sum.cpp"]\ndtypes = ["float64"]',
                                             'sources = ["broken.cpp"]\ndtypes = ["float64"]', 1))
    failed = kplay("run", folder, "--variant", "all", "--device", "cpu", "--n", "1000", "--no-bench")
    assert failed.exit_code == 3 and "mysum · cpu · float32" in failed.stdout, failed.output
    assert re.search(r"error in the float64 run: mysum/cpp: compile error", " ".join(failed.stdout.split())), failed.stdout
    from playground.pool import server

    body = {"request": {"family": "sum", "device": "cpu", "own_dtypes": True}, "files": {}}
    assert server.run_submission(body)[0]["own_dtypes"] is True
    toml.write_text(toml.read_text().replace('dtypes = ["float64"]', 'dtypes = ["bfloat16"]', 1))
    broken = kplay("list", "--path", tmp_path)
    assert "[variants.cpp] dtypes: 'bfloat16' is not one of the family's (float32, float64)" in broken.stderr


def test_the_printed_next_command_works_when_pasted(kplay, tmp_path):
    folder = tmp_path / "a b é [x]"
    result = kplay("start", "print_array", folder)
    assert result.exit_code == 0, result.output
    pasted = re.search(r"kplay check (.+?)\s+\(stuck\? kplay hint (.+?)\)$", result.stdout.strip().splitlines()[-1])
    assert shlex.split(pasted[1]) == shlex.split(pasted[2]) == [str(folder)], result.stdout


def test_start_never_overwrites_a_students_folder(kplay, tmp_path):
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "mine.cu").write_text("// my work\n")
    result = kplay("start", "sum/shuffle", tmp_path / "student")
    assert result.exit_code == 2 and "not empty" in result.output and "--force" in result.output
    assert (tmp_path / "student" / "mine.cu").read_text() == "// my work\n"


def test_check_and_hint_need_an_exercise_folder(kplay, tmp_path):
    assert kplay("eject", "sum", tmp_path / "plain", "--variant", "cpp").exit_code == 0
    for command in ("check", "hint"):
        result = kplay(command, tmp_path / "plain")
        assert result.exit_code == 2 and "is not an exercise folder" in result.output, result.output


def test_show_gives_the_starter_unless_solution_and_eject_the_kernel_unless_starter(kplay, tmp_path):
    starter = kplay("show", "sum", "--device", "cuda", "--variant", "shuffle")
    assert starter.exit_code == 0 and "TODO 1: Add up the warp's 32 values" in starter.output
    assert "kplay:" not in starter.output and "offset >>= 1" not in starter.output  # the hint's text, not the loop
    said = "the exercise's starter, its TODOs to fill in (kplay start sum/shuffle DIR); --solution shows the solution"
    assert said in " ".join(starter.output.split())
    solution = kplay("show", "sum", "--device", "cuda", "--variant", "shuffle", "--solution")
    assert "offset >>= 1" in solution.output and "TODO 1" not in solution.output
    assert "the exercise's starter" not in solution.output
    assert kplay("eject", "sum", tmp_path / "s", "--variant", "shuffle", "--starter").exit_code == 0
    assert "TODO 3: Thread 0 writes" in (tmp_path / "s" / "sum_shuffle.cu").read_text()
    assert kplay("eject", "sum", tmp_path / "full", "--variant", "shuffle").exit_code == 0
    full = (tmp_path / "full" / "sum_shuffle.cu").read_text()  # the marked solution, rendered
    assert full == (ROOT / "snippets" / "sum" / "sum_shuffle.cu").read_text().replace("{{threads}}", "256")


RUNGS = ["tree", "first-add", "shuffle", "fast"]
CPU_EXERCISES = ["print_array/cpp", "sum/cpp", "linear/cpp", "lltm/cpp"]
LINEAR_RUNGS = ["cuda-smem", "cuda-1d", "cuda-2d", "cuda-tiled", "cuda-warptile", "cuda-double-buffer",
                "cuda-tensor-core", "cuda-mma", "cuda-pipeline", "cuda-wgmma", "cuda-tma", "cuda-warp-specialized",
                "cuda-cluster", "cuda-tma-store"]
# cuda-naive is the ladder's first step, no exercise
BUILT_IN = [f"sum/{r}" for r in RUNGS] + [f"linear/{r}" for r in LINEAR_RUNGS] + ["lltm/cuda", *CPU_EXERCISES]


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_exercise_has_hints_that_say_what_and_why(name):
    family, variant = name.split("/")
    fam = registry.find(family)
    assert exercise.is_exercise(fam)
    v = fam.variant(variant)
    files = {n: (fam.path / n).read_text() for n in v.sources}
    hints = markers.starter_files(files, fam.path)[1]
    assert hints and all(h.what and h.why for h in hints), hints


@pytest.mark.nvcc
@pytest.mark.parametrize("name", [n if n == "print_array/cpp" else pytest.param(n, marks=pytest.mark.slow)
                                  for n in BUILT_IN])  # -m "not slow": a CPU starter (test_resources builds CUDA)
def test_every_built_in_starter_compiles(kplay, tmp_path, name):
    """`start` builds the starter before writing it (nvcc compiles and links here, no GPU needed)."""
    result = kplay("start", name, tmp_path / "me")
    assert result.exit_code == 0, result.output
    assert "TODO 1:" in "".join(p.read_text() for p in (tmp_path / "me").glob("*.c[up]*"))


def _coded(name: str) -> bool:
    family, variant = name.split("/")
    fam = registry.find(family)
    return any(h.code for h in exercise.hints_of(fam, fam.variant(variant), fam.parse_params([])))


@pytest.mark.nvcc
@pytest.mark.parametrize("name", [n for n in BUILT_IN if _coded(n)])
def test_every_hints_code_compiles_in_its_todos_place(tmp_path, name):
    """Each code a hint gives, put where its TODO is in the starter (all of one exercise's at once), builds."""
    from playground.family import render

    family, variant = name.split("/")
    fam = registry.find(family)
    v, params = fam.variant(variant), fam.parse_params([])
    files = {**render.sources(fam, v, params), **{n: render.header(fam, v, n) for n in v.includes}}
    hints = markers.starter_files(files, fam.path)[1]
    filled, _ = markers.starter_files(files, fam.path, fill={h.number: h.code for h in hints if h.code})
    copy = tmp_path / family
    shutil.copytree(fam.path, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for n, text in filled.items():
        (copy / n).write_text(text)
    assert all(h.code.splitlines()[0] in filled[h.file] for h in hints if h.code)
    exercise._compiles(registry.load_family(copy), v, params, name, str(copy))


@pytest.mark.cuda
@pytest.mark.parametrize("name", [n for n in BUILT_IN if n not in CPU_EXERCISES])  # CPU ones: the tests below
def test_every_built_in_starter_fails_the_check_on_the_gpu(kplay, tmp_path, name):
    assert kplay("start", name, tmp_path / "me").exit_code == 0
    result = kplay("check", tmp_path / "me", "--device", "cuda", "--json")
    rec = json.loads(result.stdout)
    assert result.exit_code == 1 and rec["passed"] < rec["checked"] and rec["speedup"] is None, rec


def test_print_arrays_starter_keeps_its_stub_and_fails_the_check_here(kplay, tmp_path):
    """A CPU exercise with a // kplay:stub: the starter prints nothing, so every case fails; the solution passes."""
    assert kplay("start", "print_array/cpp", tmp_path / "me").exit_code == 0, kplay
    source = (tmp_path / "me" / "print_array.cpp").read_text()
    assert ("    case ScalarType::Int: case ScalarType::Long: case ScalarType::Float: case ScalarType::Double:\n"
            "      break;  // prints nothing yet") in source
    assert "print_values<int32_t>(c" not in source.split("TODO 1")[1].split("\n", 1)[1] and "TODO 1: One case per dtype" in source
    result = kplay("check", tmp_path / "me", "--device", "cpu", "--json")
    rec = json.loads(result.stdout)
    assert result.exit_code == 1 and rec["passed"] == 0 and rec["checked"] > 0, rec
    table = kplay("check", tmp_path / "me", "--device", "cpu", "--seed", 1).stdout
    assert "not compared" in table and "inf" not in table and "printed 0 values, expected 1:" in table, table


@pytest.mark.nvcc
@pytest.mark.slow  # two nvcc builds; -m "not slow": test_disasm's --ptx, test_exercise's start and check
def test_show_ptx_of_a_marked_rung_is_the_starters_code_unless_solution(kplay):
    def sources(*extra):
        result = kplay("show", "sum", "--variant", "shuffle", "--ptx", "--kernel", "<float>", "--json", *extra)
        assert result.exit_code == 0, result.output
        (record,) = json.loads(result.stdout)
        return " ".join(g["source"] for f in record["functions"] for g in f["groups"])

    assert "__shfl_down_sync" not in sources()  # the starter has no shuffle to compile
    assert "__shfl_down_sync" in sources("--solution")
    listing = kplay("show", "sum", "--variant", "shuffle", "--ptx", "--kernel", "<float>")
    title = next(line for line in listing.stdout.splitlines() if "· ptx ·" in line)
    lines = listing.stdout.splitlines()
    after = lines[lines.index(title) + 1]
    assert title.endswith("· sum_shuffle.cu") and after.startswith("from the starter of ") and "kplay-starter-" not in after


@pytest.mark.nvcc
@pytest.mark.slow  # start builds the CUDA starter: one more nvcc build
def test_checking_a_cuda_exercise_without_a_gpu_says_why(kplay, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU in the worker, which picks the device
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # nor here
    started = kplay("start", "sum/shuffle", tmp_path / "me")
    said = " ".join(started.stderr.split())
    assert started.exit_code == 0 and said.startswith("warning: sum/shuffle is a CUDA exercise and there is no GPU "
                                                      "here: check it on the class's pool, or a GPU machine")
    assert "kplay check" in started.stdout and " --pool TOKEN-FILE" in started.stdout  # the next step that works
    refused = kplay("start", "sum/shuffle", tmp_path / "me")  # said before writing: also when the write is refused
    assert refused.exit_code == 2 and "is a CUDA exercise" in refused.stderr and "not empty" in refused.stderr
    result = kplay("check", tmp_path / "me")
    assert result.exit_code == 2 and "has only cuda variants (shuffle); this run is on cpu (no GPU here" in result.stderr


def test_a_crash_and_a_hang_say_what_happened_in_the_score_and_on_the_board(kplay, tmp_path):
    """A segfault at n=1 and a kernel that never returns: each record says what ended it (the hang after its
    --timeout, once, not at every dtype), and the board's table and chart say the same."""
    import time

    records = []
    for student, wrong in (("seg", "sum_segfault.cpp"), ("hang", "sum_hang.cpp")):
        folder = tmp_path / student
        assert kplay("start", "sum/cpp", folder).exit_code == 0
        shutil.copy(ROOT / "tests" / "wrong" / "sum" / wrong, folder / "sum.cpp")
        kplay("check", folder, "--timeout", "2")  # builds it
        began = time.monotonic()
        result = kplay("check", folder, "--json", "--timeout", "2", "--name", student)
        took = time.monotonic() - began
        rec = json.loads(result.stdout)
        assert result.exit_code == 4 and rec["passed"] == 0, rec
        records.append(tmp_path / f"{student}.json")
        records[-1].write_text(result.stdout)
        if student == "seg":
            assert rec["what"].startswith("crashed: segmentation fault while checking cpp at n=1 "), rec["what"]
            assert exercise.score(rec) == rec["what"] and rec["checked"] == 2, rec  # each dtype crashed
        else:
            hung = r"timed out after 2 s while checking cpp at n=1 \S+ \(float32\)"  # the case names its draw
            assert re.fullmatch(hung, rec["what"]), rec["what"]
            assert [d["dtype"] for d in rec["dtypes"]] == ["float32"] and took < 2 + 2, took
            assert re.fullmatch(hung, exercise.score(rec))
    board = kplay("board", *records, "--out", tmp_path)
    assert board.exit_code == 0 and "timed out after 2 s while checking" in board.stdout, board.output
    page = (tmp_path / "board.html").read_text()
    assert "crashed: segmentation fault while checking cpp at n=1" in page and "nothing ran" not in page


def test_two_folders_of_one_login_are_two_students_and_start_names_its_student(kplay, tmp_path, monkeypatch):
    """A lab image or JupyterHub: one login for the class. Without --name each start is its own student (the
    login and the start's id); --name or $KPLAY_STUDENT at start names the folder's records."""
    monkeypatch.delenv("KPLAY_STUDENT", raising=False)
    records = []
    for folder in (tmp_path / "a" / "me", tmp_path / "b" / "me"):
        assert kplay("start", "print_array/cpp", folder).exit_code == 0
        result = kplay("check", folder, "--json")
        records.append(folder.parent / "me.json")
        records[-1].write_text(result.stdout)
    names = [json.loads(r.read_text())["student"] for r in records]
    assert names[0] != names[1] and all(n.startswith(started.getpass.getuser() + "-") for n in names), names
    board = kplay("board", *records, "--out", tmp_path)
    assert board.exit_code == 0 and "2 students" in board.stdout, board.output
    assert kplay("start", "print_array/cpp", tmp_path / "c", "--name", "ada").exit_code == 0
    assert started.student(tmp_path / "c") == "ada"
    monkeypatch.setenv("KPLAY_STUDENT", "bo")
    assert kplay("start", "print_array/cpp", tmp_path / "d").exit_code == 0
    assert started.student(tmp_path / "d") == "bo"


def test_a_hint_can_be_shown_again_and_start_force_forgets_the_hints_seen(kplay, tmp_path):
    folder = tmp_path / "me"
    assert kplay("start", "sum/cpp", folder).exit_code == 0
    assert "hint 1/3 · TODO 1" in kplay("hint", folder).stdout
    assert "hint 2/3 · TODO 2" in kplay("hint", folder).stdout
    again = kplay("hint", folder, "1")
    assert again.exit_code == 0 and "hint 1/3 · TODO 1" in again.stdout
    assert "hint 3/3 · TODO 3" in kplay("hint", folder).stdout  # the next is still the next
    done = kplay("hint", folder)
    assert "no more hints: all 3 shown" in done.stdout and "  3. Sum the chunks in parallel" in done.stdout
    wrong = kplay("hint", folder, "4")
    assert wrong.exit_code == 2 and "hint 4: this exercise has hints 1 to 3" in wrong.stderr
    assert kplay("start", "sum/cpp", folder, "--force").exit_code == 0
    assert "hint 1/3 · TODO 1" in kplay("hint", folder).stdout


def test_the_sanitizers_cases_count_and_a_finding_takes_the_rank_away():
    """check's record after memcheck and racecheck: one case each; a race fails its case and the speedup goes."""
    passed = {"student": "ada", "family": "sum", "variant": "tree", "passed": 20, "checked": 20, "failures": {},
              "speedup": 0.49, "baseline": "torch.sum", "speedup_noise": 0.01, "exit_code": 0, "dtypes": [], "run": {}}
    clean = {"tool": "memcheck", "passed": 1, "checked": 1, "failures": {}, "exit_code": 0, "sanitize": {}}
    race = {"tool": "racecheck", "passed": 0, "checked": 1, "failures": {"race": 1}, "exit_code": 1, "sanitize": {}}
    rec = exercise.with_sanitizers(passed, [clean, race])
    assert (rec["passed"], rec["checked"], rec["failures"], rec["exit_code"]) == (21, 22, {"race": 1}, 1)
    assert rec["speedup"] is None and exercise.score(rec) == "21/22 cases passed (1 race)"
    both = exercise.with_sanitizers(passed, [clean, {**race, "passed": 1, "failures": {}, "exit_code": 0}])
    assert both["speedup"] == 0.49 and exercise.score(both) == "all 22 cases passed · 0.49× torch.sum"
    missing = exercise.with_sanitizers(passed, [])
    assert missing["checked"] == 20 and "compute-sanitizer not found" in missing["sanitizer_note"]


def test_the_score_line_says_same_where_the_table_does():
    """One comparison, one verdict: a speedup within the noise is "same" in the table and on the score line."""
    rec = {"passed": 38, "checked": 38, "failures": {}, "speedup": 0.93, "baseline": "torch.sum", "speedup_same": True}
    assert exercise.score(rec) == "all 38 cases passed · same as torch.sum (0.93×, within the noise)"
    assert exercise.score({**rec, "speedup_same": False}) == "all 38 cases passed · 0.93× torch.sum"


def test_every_family_with_a_cuda_exercise_declares_small_sanitize_sizes():
    """racecheck of a 1024^3 matmul takes minutes: check sanitizes at sizes the family declares small."""
    for name in ("sum", "linear", "lltm"):
        fam = registry.find(name)
        assert fam.sanitize_sizes, name
        for sizes in fam.sanitize_sizes:
            work = 1
            for k, v in {**fam.sizes, **sizes}.items():
                work *= v
            assert work <= 2**24, (name, sizes)


@pytest.mark.cuda
def test_a_warp_synchronous_race_that_passes_the_numbers_fails_check_as_a_race(kplay, tmp_path):
    """The tree rung with its last warp made warp-synchronous (volatile, no __syncwarp) gives right sums; check
    runs racecheck beside memcheck and fails it, kind "race", at the student's file."""
    import tomllib

    entry = next(w for w in tomllib.loads((ROOT / "tests" / "wrong" / "sum" / "wrong.toml").read_text())["wrong"]
                 if w.get("name") == "tree_warp_race")
    folder = tmp_path / "racer"
    assert kplay("start", "sum/tree", folder).exit_code == 0
    solution = (ROOT / "snippets" / "sum" / "sum_tree.cu").read_text().replace("{{threads}}", "256")
    assert solution.count(entry["patch"][0]) == 1
    (folder / "sum_tree.cu").write_text(solution.replace(*entry["patch"]))
    result = kplay("check", folder, "--json")
    rec = json.loads(result.stdout)
    assert result.exit_code == 1 and rec["failures"] == {"race": 1} and rec["speedup"] is None, rec
    race = next(t for t in rec["sanitized"] if t["tool"] == "racecheck")
    assert race["sanitize"]["findings"] and all("sum_tree.cu" in f["at"] for f in race["sanitize"]["findings"])
    (folder / "sum_tree.cu").write_text(solution)
    honest = json.loads(kplay("check", folder, "--json").stdout)
    assert honest["exit_code"] == 0 and honest["speedup"] and len(honest["sanitized"]) == 2, honest
