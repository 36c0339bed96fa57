"""The workshop loop: eject, edit, rebuild, new, export; and a broken kernel never takes kplay down."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

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
    assert again.exit_code == 2 and "will not overwrite" in again.stderr
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
    ("sum_abort.cpp", "abort"),
])
def test_a_crashing_kernel_is_exit_4_and_the_next_run_works(kplay, wrong_kernel, source, verdict):
    folder = wrong_kernel("sum", source)
    result = kplay("run", folder, "--device", "cpu", "--n", "100")
    assert result.exit_code == 4
    assert verdict in result.stderr and "while checking cpp" in result.stderr
    assert kplay("run", "sum", "--device", "cpu", "--n", "100", "--no-bench").exit_code == 0


def test_a_hanging_kernel_times_out(kplay, wrong_kernel):
    folder = wrong_kernel("sum", "sum_hang.cpp")
    start = time.monotonic()
    result = kplay("run", folder, "--device", "cpu", "--n", "100", "--timeout", "2")
    assert result.exit_code == 4 and "timed out after 2 s" in result.stderr
    assert time.monotonic() - start < 60


def _fresh_family(tmp_path, kplay, name="fresh"):
    """A family whose build nobody has cached yet."""
    folder = tmp_path / name
    assert kplay("new", name, folder).exit_code == 0
    cpp = folder / f"{name}.cpp"
    cpp.write_text(cpp.read_text() + f"// {tmp_path.name}\n")
    return folder


def test_a_killed_build_leaves_no_stale_lock(kplay, tmp_path):
    folder = _fresh_family(tmp_path, kplay)
    child = subprocess.Popen([*CLI, "run", str(folder), "--device", "cpu", "--no-bench"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(3)  # past torch's import, inside the compiler
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    done = subprocess.run([*CLI, "run", str(folder), "--device", "cpu", "--no-bench"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_two_runs_at_once_share_one_build(tmp_path, kplay):
    folder = _fresh_family(tmp_path, kplay)
    cmd = [*CLI, "run", str(folder), "--device", "cpu", "--no-bench", "--json"]
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    records = [json.loads(p.communicate(timeout=180)[0]) for p in runs]
    assert all(p.returncode == 0 for p in runs)
    assert sorted(r["variants"][0]["build"]["cached"] for r in records) == [False, True]


def test_a_corrupt_cache_entry_is_rebuilt(kplay, tmp_path, cache):
    folder = _fresh_family(tmp_path, kplay)
    result, r = run_json(kplay, folder)
    name = r["variants"][0]["build"]["name"]
    library = cache / name / f"{name}.so"
    library.write_bytes(library.read_bytes()[:1000])  # a half-written library
    result, r = run_json(kplay, folder)
    assert result.exit_code == 0 and not r["variants"][0]["build"]["cached"]


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


def test_a_faulting_cuda_kernel_compiles_here():
    from playground import registry
    from playground.build import build

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
    assert sorted(p.name for p in (tmp_path / "fast").iterdir()) == ["spec.py", "sum_cuda.cpp", "sum_fast.cu", "task.toml"]
    result = kplay("export", "sum", tmp_path / "pkg", "--variant", "fast")
    assert result.exit_code == 0 and "CUDAExtension" in (tmp_path / "pkg" / "setup.py").read_text()


def test_a_variant_using_cublaslt_gets_torchs_copy_and_its_headers(kplay, tmp_path):
    """libraries = ["cublasLt"]: the library torch loaded (no second copy) and the headers beside it,
    carried by eject and written into an export's setup.py."""
    from playground.build import nvidia_library
    from playground.registry import tomllib

    inc, so = nvidia_library("cublasLt")
    assert os.path.exists(os.path.join(inc, "cublasLt.h")) and "libcublasLt.so" in so
    assert so in open("/proc/self/maps").read()  # the very file torch loaded
    assert kplay("eject", "lltm", tmp_path / "mine", "--variant", "cuda-fast").exit_code == 0
    assert tomllib.loads((tmp_path / "mine" / "task.toml").read_text())["variants"]["cuda-fast"]["libraries"] == ["cublasLt"]
    assert kplay("export", "lltm", tmp_path / "pkg", "--variant", "cuda-fast").exit_code == 0
    setup = (tmp_path / "pkg" / "setup.py").read_text()
    assert f"include_dirs=[{inc!r}]" in setup and f"extra_link_args=[{so!r}]" in setup


def test_a_library_torch_did_not_load_is_a_one_line_error(kplay, tmp_path):
    folder = tmp_path / "nolib"
    assert kplay("eject", "sum", folder, "--device", "cpu").exit_code == 0
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace('[variants.cpp]', '[variants.cpp]\nlibraries = ["nosuchlib"]'))
    result = kplay("run", folder, "--device", "cpu", "--no-bench")
    assert result.exit_code == 3 and "CUDA library nosuchlib" in result.stderr  # 3: a build error
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
