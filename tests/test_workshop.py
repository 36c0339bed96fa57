"""The workshop loop: eject, edit, rebuild, new, export; and a broken kernel never takes kplay down."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, private_cache

CLI = [sys.executable, str(ROOT / "cli.py")]


def run_json(kplay, *args):
    result = kplay("run", *args, "--device", "cpu", "--json", "--no-bench")
    return result, (json.loads(result.stdout) if result.stdout.strip().startswith("{") else None)


def test_eject_writes_rendered_sources_and_never_overwrites(kplay, tmp_path):
    target = tmp_path / "mysum"
    result = kplay("eject", "sum", target, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in target.iterdir()) == ["spec.py", "sum.cpp", "task.toml"]
    (target / "sum.cpp").write_text((target / "sum.cpp").read_text() + "// my change\n")
    again = kplay("eject", "sum", target, "--device", "cpu")
    assert again.exit_code == 2 and f"will not overwrite 3 files in {target} (" in again.stderr
    assert (target / "sum.cpp").read_text().endswith("// my change\n")
    forced = kplay("eject", "sum", target, "--device", "cpu", "--force")
    assert forced.exit_code == 0 and not (target / "sum.cpp").read_text().endswith("// my change\n")


def test_eject_renders_parameters(kplay, tmp_path):
    result = kplay("eject", "sum", tmp_path / "s", "--param", "threads=512")
    assert result.exit_code == 0, result.output
    cuda = [p for p in (tmp_path / "s").glob("*.cu")]
    assert cuda and all("{{" not in p.read_text() for p in cuda)
    assert "threads=512" in (tmp_path / "s" / "task.toml").read_text()


def test_edit_loop_errors_map_to_the_users_file_and_revert_hits_the_cache(kplay, tmp_path):
    target = tmp_path / "s"
    assert kplay("eject", "sum", target, "--device", "cpu").exit_code == 0
    source = target / "sum.cpp"
    good = source.read_text()
    assert run_json(kplay, target, "--n", "1000")[0].exit_code == 0  # the same content as the built-in: cached
    lines = good.splitlines()
    line = next(i for i, text in enumerate(lines) if "total += x[i];" in text)
    lines[line] = lines[line].replace("total += x[i];", "total += x[i]")  # the classic: a missing ;
    source.write_text("\n".join(lines) + "\n")
    broken = kplay("run", target, "--device", "cpu", "--n", "1000")
    assert broken.exit_code == 3
    assert f"sum.cpp:{line + 1}" in broken.stderr and str(source) in broken.stderr
    assert "total += x[i]" in broken.stderr and "ninja" not in broken.stderr
    source.write_text(good)
    result, r = run_json(kplay, target, "--n", "1000")
    assert result.exit_code == 0 and r["variants"][0]["build"]["cached"]


def test_new_family_passes_and_is_found_on_the_search_path(kplay, tmp_path, monkeypatch):
    result = kplay("new", "axpb", tmp_path / "axpb")
    assert result.exit_code == 0, result.output
    result, r = run_json(kplay, tmp_path / "axpb")
    assert result.exit_code == 0 and r["ok"], result.output
    monkeypatch.setenv("KPLAY_PATH", str(tmp_path))
    assert "axpb" in json.dumps(json.loads(kplay("list", "--json").stdout))
    monkeypatch.delenv("KPLAY_PATH")
    assert "axpb" in kplay("list", "--path", tmp_path).stdout
    assert kplay("new", "axpb", tmp_path / "axpb").exit_code == 2  # never overwrites


@pytest.mark.parametrize("source, verdict", [
    ("sum_segfault.cpp", "segmentation fault"),
    pytest.param("sum_abort.cpp", "abort", marks=pytest.mark.slow),  # -m "not slow": a segfault, here and in test_zygote
])
def test_a_crashing_kernel_is_exit_4_and_the_next_run_works(kplay, wrong_kernel, source, verdict):
    folder = wrong_kernel("sum", source)
    result = kplay("run", folder, "--device", "cpu", "--n", "100")
    assert result.exit_code == 4
    assert verdict in result.stderr and "while checking cpp" in result.stderr
    assert kplay("run", "sum", "--device", "cpu", "--n", "100", "--no-bench").exit_code == 0


@pytest.mark.slow  # -m "not slow": test_zygote times a hanging kernel out, the crash tests give exit 4
def test_a_hanging_kernel_times_out(kplay, wrong_kernel):
    folder = wrong_kernel("sum", "sum_hang.cpp")
    start = time.monotonic()
    result = kplay("run", folder, "--device", "cpu", "--n", "100", "--timeout", "2")
    assert result.exit_code == 4 and "a call of the kernel took over 2 s" in result.stderr
    assert time.monotonic() - start < 60


def _fresh_family(tmp_path, kplay, name="fresh"):
    """A family whose build nobody has cached yet."""
    folder = tmp_path / name
    assert kplay("new", name, folder).exit_code == 0
    cpp = folder / f"{name}.cpp"
    cpp.write_text(cpp.read_text() + f"// {tmp_path.name}\n")
    return folder


def _ours(cache) -> list[str]:
    """Processes started by a kplay that used this cache (the worker, ninja, the compiler): their command lines."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if f"KPLAY_CACHE={cache}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def aten_cache(tmp_path_factory):
    """A cache of these tests' own (their processes are told apart by it), with the ATen headers precompiled (the
    session's, which it links to): a kill meets the compile of linear.cpp itself."""
    from playground.compiler import build
    from playground.family import registry

    linear = registry.find("linear")
    assert build.precompile(linear, linear.variants["cpp"])
    return private_cache(tmp_path_factory.mktemp("aten-cache") / "cache")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGHUP", "SIGKILL", "SIGKILL of its group"])
def test_killing_kplay_mid_compile_kills_its_worker_and_every_compiler(aten_cache, tmp_path, how):
    """ninja starts each compile in a process group of its own: kplay kills by session, within a second."""
    folder = tmp_path / "linear"
    shutil.copytree(ROOT / "snippets" / "linear", folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "linear.cpp").write_text((folder / "linear.cpp").read_text() + f"// {how}: a build of its own\n")
    env = {**os.environ, "KPLAY_CACHE": str(aten_cache)}
    cmd = [*CLI, "run", str(folder), "--variant", "cpp", "--device", "cpu", "--no-bench"]
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while not any("cc1plus" in c for c in _ours(aten_cache)):  # inside the compiler
        assert time.monotonic() < deadline and child.poll() is None, "the build never started"
        time.sleep(0.02)
    if how == "SIGKILL of its group":
        os.killpg(child.pid, signal.SIGKILL)
    else:
        os.kill(child.pid, getattr(signal, how))
    child.wait()
    time.sleep(1)
    assert not _ours(aten_cache), "left running 1 s later"
    if how == "SIGKILL":  # no stale lock: it builds and passes
        done = subprocess.run(cmd, capture_output=True, timeout=180, env=env)
        assert done.returncode == 0, done.stderr


@pytest.mark.slow  # two builds at once on two cores
def test_two_runs_at_once_share_one_build(tmp_path, kplay):
    folder = _fresh_family(tmp_path, kplay)
    cmd = [*CLI, "run", str(folder), "--device", "cpu", "--no-bench", "--json"]
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    records = [json.loads(p.communicate(timeout=180)[0]) for p in runs]
    assert all(p.returncode == 0 for p in runs)
    assert sorted(r["variants"][0]["build"]["cached"] for r in records) == [False, True]


@pytest.mark.slow  # a rebuild
def test_a_corrupt_cache_entry_is_rebuilt(kplay, tmp_path, cache):
    folder = _fresh_family(tmp_path, kplay)
    result, r = run_json(kplay, folder)
    name = r["variants"][0]["build"]["name"]
    library = cache / name / f"{name}.so"
    library.write_bytes(library.read_bytes()[:1000])  # a half-written library
    result, r = run_json(kplay, folder)
    assert result.exit_code == 0 and not r["variants"][0]["build"]["cached"]


@pytest.mark.slow
def test_export_builds_a_package_that_imports_and_passes_its_test(kplay, tmp_path):
    target = tmp_path / "pkg"
    result = kplay("export", "sum", target, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "CppExtension" in (target / "setup.py").read_text()
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                    "--target", str(site), str(target)], check=True, timeout=600)
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = "import torch, sum_ext; print(sum_ext.ops.sum(torch.ones(1025)).item())"
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "1025.0", done.stderr
    tested = subprocess.run([sys.executable, "-m", "pytest", "-q", str(target / "tests")], env=env,
                            capture_output=True, text=True, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout


@pytest.mark.nvcc
@pytest.mark.slow  # one more nvcc build
def test_a_faulting_cuda_kernel_compiles_here():
    from playground.family import registry
    from playground.compiler.build import build
    fam = registry.find(str(ROOT / "tests" / "wrong" / "cuda_fault"))
    ops, info = build(fam, fam.variants["fault"], {})
    assert info.name.startswith("kplay_cuda_fault_fault_")


@pytest.mark.cuda
def test_a_cuda_illegal_memory_access_is_exit_4_and_the_next_run_works(kplay):
    result = kplay("run", ROOT / "tests" / "wrong" / "cuda_fault", "--device", "cuda")
    assert result.exit_code == 4 and "illegal memory access" in result.stderr, result.output
    assert kplay("run", "sum", "--device", "cuda", "--n", "1000", "--no-bench").exit_code == 0


def test_eject_and_export_one_variant_by_name(kplay, tmp_path):
    result = kplay("eject", "sum", tmp_path / "fast", "--variant", "fast")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "fast").iterdir()) == [
        "ladder.cuh", "spec.py", "sum_cuda.cpp", "sum_fast.cu", "task.toml"]
    result = kplay("export", "sum", tmp_path / "pkg", "--variant", "fast")
    assert result.exit_code == 0 and "CUDAExtension" in (tmp_path / "pkg" / "setup.py").read_text()
    csrc = tmp_path / "pkg" / "sum_ext" / "csrc"
    assert (csrc / "ladder.cuh").read_text() == (ROOT / "snippets" / "sum" / "ladder.cuh").read_text()
    assert (csrc / "kplay" / "stable.h").read_text() == (ROOT / "playground" / "include" / "kplay" / "stable.h").read_text()


def test_a_variant_using_cublaslt_gets_torchs_copy_and_its_headers(kplay, tmp_path):
    """libraries = ["cublasLt"]: the library torch loaded (no second copy) and the headers beside it,
    carried by eject and written into an export's setup.py."""
    from playground.compiler.toolchain import nvidia_library
    from playground.family.registry import tomllib

    inc, so = nvidia_library("cublasLt")
    assert os.path.exists(os.path.join(inc, "cublasLt.h")) and "libcublasLt.so" in so
    assert so in open("/proc/self/maps").read()  # the very file torch loaded
    assert kplay("eject", "lltm", tmp_path / "mine", "--variant", "cuda-fast").exit_code == 0
    assert tomllib.loads((tmp_path / "mine" / "task.toml").read_text())["variants"]["cuda-fast"]["libraries"] == ["cublasLt"]
    assert kplay("export", "lltm", tmp_path / "pkg", "--variant", "cuda-fast").exit_code == 0
    setup = (tmp_path / "pkg" / "setup.py").read_text()
    assert f"include_dirs=[str(CSRC), {inc!r}]" in setup and f"extra_link_args=[{so!r}]" in setup


def test_a_library_torch_did_not_load_is_a_one_line_error(kplay, tmp_path):
    folder = tmp_path / "nolib"
    assert kplay("eject", "sum", folder, "--device", "cpu").exit_code == 0
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace('[variants.cpp]', '[variants.cpp]\nlibraries = ["nosuchlib"]'))
    result = kplay("run", folder, "--device", "cpu", "--no-bench")
    assert result.exit_code == 3 and "CUDA library nosuchlib" in result.stderr  # 3: a build error
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


AFFINE_H = """// y = 2·x + 1, in a header the family's source includes (task.toml: includes = ["affine.h"])
#pragma once
template <typename T>
T scale_shift(T x) { return 2 * x + 1; }
"""


def _family_with_header(tmp_path, kplay, name="affine"):
    """`kplay new`'s family with its arithmetic moved into affine.h, listed in task.toml's includes."""
    folder = _fresh_family(tmp_path, kplay, name)
    (folder / "affine.h").write_text(AFFINE_H)
    cpp = folder / f"{name}.cpp"
    text = cpp.read_text().replace("#include <torch/headeronly/core/ScalarType.h>\n",
                                   '#include <torch/headeronly/core/ScalarType.h>\n#include "affine.h"\n')
    cpp.write_text(text.replace("y[i] = 2 * x[i] + 1;", "y[i] = scale_shift(x[i]);"))
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("[variants.cpp]\n", '[variants.cpp]\nincludes = ["affine.h"]\n'))
    return folder


@pytest.mark.slow
def test_a_header_edit_rebuilds_and_going_back_hits_the_cache(kplay, tmp_path):
    folder = _family_with_header(tmp_path, kplay)
    result, first = run_json(kplay, folder)
    assert result.exit_code == 0 and first["ok"], result.output
    header = folder / "affine.h"
    header.write_text(AFFINE_H.replace("2 * x + 1", "2 * x + 2"))  # wrong: proves the header is compiled in
    result, wrong = run_json(kplay, folder)
    assert result.exit_code == 1 and not wrong["variants"][0]["build"]["cached"]
    header.write_text(AFFINE_H)
    result, back = run_json(kplay, folder)
    assert result.exit_code == 0 and back["variants"][0]["build"]["cached"]
    assert back["variants"][0]["build"]["name"] == first["variants"][0]["build"]["name"]


def test_a_compile_error_in_a_header_points_at_the_header(kplay, tmp_path):
    folder = _family_with_header(tmp_path, kplay)
    (folder / "affine.h").write_text(AFFINE_H.replace("2 * x + 1;", "2 * x + 1"))  # line 4: a missing ;
    result = kplay("run", folder, "--device", "cpu", "--no-bench")
    assert result.exit_code == 3
    first = result.stderr.splitlines()[0]
    assert "compile error in affine.h:4" in first and "affine.cpp" not in first, result.stderr
    assert f"{folder / 'affine.h'}:4" in result.stderr and "T scale_shift(T x)" in result.stderr


def test_a_missing_header_listed_in_includes_is_one_line_exit_2(kplay, tmp_path):
    folder = _family_with_header(tmp_path, kplay)
    (folder / "affine.h").unlink()
    result = kplay("run", folder, "--device", "cpu", "--no-bench")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: affine/cpp: header {folder / 'affine.h'} (task.toml includes) does not exist"]
    assert kplay("eject", folder, tmp_path / "copy").exit_code == 2  # nothing half-written either
    assert not (tmp_path / "copy").exists()


def test_eject_of_a_family_with_includes_builds_and_passes_from_the_ejected_folder(kplay, tmp_path):
    from playground.family.registry import tomllib

    original = _family_with_header(tmp_path, kplay)
    target = tmp_path / "ejected"
    assert kplay("eject", original, target).exit_code == 0
    assert (target / "affine.h").read_text() == AFFINE_H
    assert tomllib.loads((target / "task.toml").read_text())["variants"]["cpp"]["includes"] == ["affine.h"]
    (original / "affine.h").write_text("#error the ejected folder must not read its origin\n")
    result, r = run_json(kplay, target)
    assert result.exit_code == 0 and r["ok"], result.output


def test_export_writes_the_headers_and_puts_csrc_on_the_include_path(kplay, tmp_path):
    folder = _family_with_header(tmp_path, kplay)
    assert kplay("export", folder, tmp_path / "pkg").exit_code == 0
    csrc = tmp_path / "pkg" / "affine_ext" / "csrc"
    assert (csrc / "affine.h").read_text() == AFFINE_H
    assert (csrc / "kplay" / "stable.h").exists()  # the sources' #include <kplay/stable.h>
    setup = (tmp_path / "pkg" / "setup.py").read_text()
    assert "include_dirs=[str(CSRC)]" in setup and "['affine_ext/csrc/affine.cpp']" in setup  # headers are not sources
    assert "package_data={\"affine_ext\": ['csrc/*', 'csrc/kplay/*']}" in setup


def test_every_build_hashes_the_engine_header(monkeypatch, tmp_path):
    """kplay/stable.h is on every build's -I path; editing it renames (rebuilds) every build."""
    import shutil

    from playground.compiler import build
    from playground.family import registry

    fam = registry.find("sum")
    variant = fam.variants["cpp"]
    srcs = {"sum.cpp": (fam.path / "sum.cpp").read_text()}
    name, args = build.identity(fam, variant, srcs)
    assert args["extra_include_paths"][0] == str(build.ENGINE_INCLUDE)
    copy = tmp_path / "include"
    shutil.copytree(build.ENGINE_INCLUDE, copy)
    (copy / "kplay" / "stable.h").write_text((copy / "kplay" / "stable.h").read_text() + "// edited\n")
    monkeypatch.setattr(build, "ENGINE_INCLUDE", copy)
    assert build.identity(fam, variant, srcs)[0] != name


def test_a_build_links_with_gold_where_the_toolchain_has_it():
    """gold links a kernel's library in under half of ld's time: used where it works, and the library loads."""
    import playground
    from playground.compiler import build
    from playground.family import registry

    fam = registry.find("sum")
    srcs = {"sum.cpp": (fam.path / "sum.cpp").read_text()}
    name, args = build.identity(fam, fam.variants["cpp"], srcs)
    assert ("-fuse-ld=gold" in args["extra_ldflags"]) == bool(shutil.which("ld.gold"))
    assert playground.load("sum", variant="cpp", device="cpu").sum is not None
    library = build.folder(name) / f"{name}.so"
    notes = subprocess.run(["readelf", "-n", library], capture_output=True, text=True).stdout
    assert ("NT_GNU_GOLD_VERSION" in notes) == bool(shutil.which("ld.gold")), notes


@pytest.mark.cuda
def test_an_ejected_cuda_rung_passes_from_its_folder(kplay, tmp_path):
    assert kplay("eject", "sum", tmp_path / "tree", "--variant", "tree", "--solution").exit_code == 0  # tree is an exercise
    result = kplay("run", tmp_path / "tree", "--device", "cuda", "--variant", "tree", "--n", "1e6", "--no-bench")
    assert result.exit_code == 0, result.output


@pytest.mark.nvcc
@pytest.mark.slow  # -m "not slow": test_resources maps an nvcc error to the student's .cu file
def test_an_ejected_cuda_rung_compiles_from_its_folder_and_a_header_error_points_at_it(kplay, tmp_path):
    """ladder.cuh travels with the rung; nvcc's `file(line): error` in it names the header and its line."""
    from playground.family import registry
    from playground.compiler.build import build
    from playground.core.errors import BuildError

    folder = tmp_path / "tree"
    assert kplay("eject", "sum", folder, "--variant", "tree").exit_code == 0
    fam = registry.find(str(folder))
    assert fam.variants["tree"].includes == ("ladder.cuh",)
    assert build(fam, fam.variants["tree"], {})[0].sum._schemas
    header = folder / "ladder.cuh"
    lines = header.read_text().splitlines()
    line = next(i for i, text in enumerate(lines) if text.strip() == "n = blocks;")
    lines[line] = lines[line].replace("n = blocks;", "n = blockz;")
    header.write_text("\n".join(lines) + "\n")
    with pytest.raises(BuildError) as failed:
        build(fam, fam.variants["tree"], {})
    assert f"compile error in ladder.cuh:{line + 1}" in str(failed.value) and "blockz" in str(failed.value)
    assert any(d.startswith(f"{header}:{line + 1}") for d in failed.value.details), failed.value.details
