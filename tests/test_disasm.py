"""kplay show --ptx / --sass / --asm and the C++ vectorization report, all read from the build (no GPU needed)."""

import json
import os
import platform
import shutil

import pytest

from conftest import ROOT
from playground.compiler import disasm, remarks
SUM = ROOT / "snippets" / "sum"


def line_of(path, text: str) -> int:
    """The 1-based number of the first line of a file that contains `text`."""
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def groups(record: dict, file=None):
    return [g for f in record["functions"] for g in f["groups"] if file is None or g["file"] == str(file)]


def show_json(kplay, *args) -> dict:
    """The one variant's record of `kplay show ... --json` (a list: one record per variant shown)."""
    result = kplay("show", *args, "--json")
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    return record


def has_nvdisasm() -> bool:
    try:
        return bool(disasm.tool("nvdisasm"))
    except Exception:
        return False


@pytest.mark.nvcc
@pytest.mark.skipif(not has_nvdisasm(), reason="needs nvdisasm (pip install nvidia-cuda-nvdisasm)")
def test_sass_of_fast_shows_its_16_byte_loads_under_their_source_line(kplay):
    """The GPU box's acceptance: `kplay show sum --variant fast --sass` has LDG.E.128 under the body[i] loads."""
    r = show_json(kplay, "sum", "--variant", "fast", "--sass", "--solution")
    loads = [g for g in groups(r) if any(c.startswith("LDG.E.128") for c in g["code"])]  # sm_90: LDG.E.128.CONSTANT
    assert loads and all(g["file"] == str(SUM / "sum_fast.cu") for g in loads)
    assert line_of(SUM / "sum_fast.cu", "const V a = body[i]") in {g["line"] for g in loads}
    assert {f["name"].split("(")[0] for f in r["functions"]} == {"void sum_fast_kernel<float>", "void sum_fast_kernel<double>"}
    table = kplay("show", "sum", "--variant", "fast", "--sass", "--kernel", "<float>", "--solution")
    assert table.exit_code == 0 and "LDG.E.128" in table.stdout and "body[i]" in table.stdout
    assert "sum_fast_kernel<double>" not in table.stdout


@pytest.mark.nvcc
@pytest.mark.slow  # one more nvcc build; -m "not slow" reads a build's resources (test_resources)
def test_ptx_of_fast_shows_vector_loads_and_follows_the_threads_param(kplay):
    r = show_json(kplay, "sum", "--variant", "fast", "--ptx", "--param", "threads=512", "--kernel", "<float>", "--solution")
    assert len(r["functions"]) == 1
    loads = [g for g in groups(r, SUM / "sum_fast.cu") if any(c.startswith("ld.global") and ".v4." in c for c in g["code"])]
    assert line_of(SUM / "sum_fast.cu", "const V a = body[i]") in {g["line"] for g in loads}
    assert "const V a = body[i]" in next(g["source"] for g in loads if "body[i]" in g["source"])
    shared = [c for g in groups(r) for c in g["code"] if "warp_sums[" in c]  # one float per warp: 16 at 512 threads
    assert shared and all(c.endswith("warp_sums[64];") for c in shared)


def test_sass_or_ptx_of_a_cpu_variant_is_one_line_exit_2(kplay):
    for flag in ("--sass", "--ptx"):
        result = kplay("show", "sum", "--variant", "cpp", flag)
        assert result.exit_code == 2 and "sum/cpp is a cpu variant with no CUDA source" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_two_code_views_at_once_is_refused(kplay):
    result = kplay("show", "sum", "--asm", "--ptx")
    assert result.exit_code == 2 and "choose one" in result.stderr


def test_a_missing_nvdisasm_names_its_pip_package(kplay, monkeypatch):
    monkeypatch.setattr("playground.compiler.toolchain.cuda_tool", lambda name: None)  # not on PATH, in CUDA, nor a wheel
    result = kplay("show", "sum", "--variant", "fast", "--sass")
    assert result.exit_code == 2, result.output
    assert "pip install nvidia-cuda-nvdisasm" in result.stderr and "kplay[insight]" in result.stderr
    errors = [line for line in result.stderr.splitlines() if not line.startswith("✓")]  # a fresh build says so first
    assert len(errors) == 1 and errors[0].startswith("error: nvdisasm not found")


def test_nvdisasm_is_found_in_the_pip_wheel(tmp_path, monkeypatch):
    """The wheel puts it in site-packages/nvidia/cu13/bin (this box has no other)."""
    fake = tmp_path / "nvidia" / "cu13" / "bin"
    fake.mkdir(parents=True)
    (fake / "nvdisasm").write_text("#!/bin/sh\n")
    (fake / "nvdisasm").chmod(0o755)
    import torch.utils.cpp_extension  # noqa: F401  (it reads CUDA_HOME once, on import: the real one, not the fake)

    monkeypatch.setattr("sys.path", [str(tmp_path)])
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    if os.access("/usr/local/cuda/bin/nvdisasm", os.X_OK):
        pytest.skip("the CUDA toolkit's nvdisasm comes first")
    assert disasm.tool("nvdisasm") == str(fake / "nvdisasm")


@pytest.mark.nvcc
def test_kernel_naming_no_kernel_lists_the_kernels(kplay):
    result = kplay("show", "sum", "--variant", "fast", "--ptx", "--kernel", "nope", "--solution")
    assert result.exit_code == 2, result.output
    assert "--kernel nope" in result.stderr and "sum_fast_kernel<float>, sum_fast_kernel<double>" in result.stderr
    errors = [line for line in result.stderr.splitlines() if not line.startswith("✓")]  # a fresh build says so first
    assert len(errors) == 1 and errors[0].startswith("error: --kernel nope")


def test_asm_of_sum_cpp_puts_the_vector_adds_under_the_lane_loop(kplay):
    lane = line_of(SUM / "sum.cpp", "++l) lane[l] += x[i + j + l]")
    r = show_json(kplay, "sum", "--asm", "--kernel", "sum_range<float>", "--solution")
    assert [f["name"] for f in r["functions"]] == ["double sum_range<float>(float const*, long, long)"]
    under = [c for g in groups(r, SUM / "sum.cpp") if g["line"] == lane for c in g["code"]]
    assert under and all(g["source"] for g in groups(r, SUM / "sum.cpp"))
    if platform.machine() == "x86_64":
        assert any("addps" in c for c in under)  # packed adds: the loop is vectorized
    loop = next(loop for loop in r["loops"] if loop["line"] == lane)
    assert loop["file"] == str(SUM / "sum.cpp") and loop["vectorized"] == loop["copies"] > 0
    table = kplay("show", "sum", "--asm", "--kernel", "sum_range<float>", "--solution")
    assert table.exit_code == 0 and f"sum.cpp:{lane} vectorized" in table.stdout


def test_run_of_sum_cpp_shows_the_vectorization_line(kplay):
    """CI acceptance: the vectorization line shows for sum cpp, from the build, cached or not; --explain lists it."""
    lane = line_of(SUM / "sum.cpp", "++l) lane[l] += x[i + j + l]")
    for _ in range(2):  # the second run is a cached build: the remarks were kept with it
        result = kplay("run", "sum", "--n", "1e4", "--device", "cpu", "--no-bench", "--json")
        assert result.exit_code == 0, result.output
        v = json.loads(result.stdout)["variants"][0]
        loop = next(loop for loop in v["build"]["loops"] if loop["line"] == lane)
        assert loop["file"] == str(SUM / "sum.cpp") and loop["vectorized"] > 0
    assert v["build"]["cached"]
    short = kplay("run", "sum", "--n", "1e4", "--device", "cpu", "--no-bench")
    done = sum(loop["vectorized"] > 0 for loop in v["build"]["loops"])
    assert f"cpp: the compiler vectorized {done} of {len(v['build']['loops'])} loops in sum.cpp" in short.stdout
    explained = kplay("run", "sum", "--n", "1e4", "--device", "cpu", "--no-bench", "--explain")
    assert f"cpp: sum.cpp:{lane} vectorized" in explained.stdout


def test_show_asm_of_an_ejected_folder_names_its_files(kplay, tmp_path):
    folder = tmp_path / "mysum"
    assert kplay("eject", "sum", folder, "--variant", "cpp").exit_code == 0
    r = show_json(kplay, str(folder), "--asm", "--kernel", "sum_all<float>")
    files = {g["file"] for g in groups(r) if g["file"].endswith("sum.cpp")}
    assert files == {str(folder.resolve() / "sum.cpp")}
    assert all(loop["file"] == str(folder.resolve() / "sum.cpp") for loop in r["loops"]) and r["loops"]


GCC = """\
/c/kplay_x/main.cpp:9:25: optimized: loop vectorized using 32 byte vectors
/c/kplay_x/main.cpp:8:12: missed: couldn't vectorize loop
/c/kplay_x/main.cpp:9:54: missed: not vectorized: complicated access pattern.
/c/kplay_x/main.cpp:9:25: optimized: loop vectorized using 32 byte vectors
/c/kplay_x/main.cpp:12:3: missed: couldn't vectorize loop
/c/kplay_x/main.cpp:12:9: missed: not vectorized: no vectype for stmt: _27 = *_26;
/c/kplay_x/main.cpp:14:3: missed: statement clobbers memory: _16 = f (_15);
"""
CLANG = """\
a.cpp:5:3: remark: loop not vectorized: cannot prove it is safe to reorder floating-point operations [-Rpass-analysis=loop-vectorize]
a.cpp:5:3: remark: loop not vectorized [-Rpass-missed=loop-vectorize]
a.cpp:9:3: remark: vectorized loop (vectorization width: 8, interleaved count: 4) [-Rpass=loop-vectorize]
"""


def test_remarks_become_one_verdict_per_loop():
    """gcc's reason follows its loop (at the statement's line); clang's is at the loop's line; SLP notes are not loops."""
    found = {(loop.line, loop.vectorized, loop.copies, loop.how, loop.why_not) for loop in remarks.parse_remarks(GCC)}
    assert found == {(9, 2, 2, "using 32 byte vectors", ""), (8, 0, 1, "", "complicated access pattern"),
                     (12, 0, 1, "", "no vectype for stmt")}
    found = {(loop.line, loop.vectorized, loop.how, loop.why_not) for loop in remarks.parse_remarks(CLANG)}
    assert found == {(5, 0, "", "cannot prove it is safe to reorder floating-point operations"),
                     (9, 1, "vectorization width: 8, interleaved count: 4", "")}


SASS = """\
//--------------------- .text._Z1kPf --------------------------
        .section        .text._Z1kPf,"ax",@progbits
_Z1kPf:
        //## File "/c/kplay_x/cuda.cu", line 4
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.128.CONSTANT R4, desc[UR6][R28.64] ;
.L_x_2:
        //## File "/c/kplay_x/cuda.cu", line 7
        /*0020*/                   EXIT ;
        /*0030*/                   NOP;
"""


def test_sass_groups_instructions_under_their_line_marks():
    (k,) = disasm.parse_sass(SASS)
    assert k.symbol == "_Z1kPf"
    assert [(g.line, g.code) for g in k.groups] == [
        (4, ["LDC R1, c[0x0][0x28]", "LDG.E.128.CONSTANT R4, desc[UR6][R28.64]", ".L_x_2:"]), (7, ["EXIT"])]


@pytest.mark.slow  # two builds of a source of its own, for one edge: a clean in the same process
def test_show_after_a_clean_in_the_same_process_builds_again(kplay, own_cache, tmp_path):
    """A library loads once per process; after `kplay clean` its folder is built again for `show` to read.

    The cache is this test's (the session's is shared), so the source is one no test has loaded in this process:
    a library loaded from two folders would register its ops twice."""
    folder = tmp_path / "sum"
    shutil.copytree(SUM, folder)
    (folder / "sum.cpp").write_text((SUM / "sum.cpp").read_text() + f"// {tmp_path}\n")
    first = show_json(kplay, folder, "--asm", "--kernel", "sum_all<float>", "--solution")
    assert kplay("clean").exit_code == 0
    again = show_json(kplay, folder, "--asm", "--kernel", "sum_all<float>", "--solution")
    assert again["functions"] == first["functions"] and again["loops"] == first["loops"]
    result = kplay("run", folder, "--n", "1e3", "--device", "cpu", "--no-bench", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["variants"][0]["build"]["loops"] == first["loops"]


def test_a_cuda_home_torch_guessed_before_kplay_ran_is_set_right(monkeypatch):
    """torch.utils.cpp_extension fixes CUDA_HOME when first imported (a notebook may import it first, with
    /usr/local guessed from nvcc's symlink): kplay's set-up puts the real root there, or the link misses cudart."""
    import torch.utils.cpp_extension as ext

    from playground.compiler import toolchain
    if not toolchain.cuda_home():
        pytest.skip("no CUDA toolkit here")
    monkeypatch.setattr(ext, "CUDA_HOME", "/nowhere")
    toolchain.setup_env()
    assert ext.CUDA_HOME == toolchain.cuda_home()
