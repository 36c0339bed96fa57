"""The build cache is safe to share with `kplay clean`, and an unwritable one is one line."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import private_cache

ROOT = Path(__file__).resolve().parent.parent
KPLAY = [sys.executable, str(ROOT / "cli.py")]


def env(cache: Path) -> dict:
    return {**os.environ, "KPLAY_CACHE": str(cache), "KPLAY_ZYGOTE": "0", "COLUMNS": "200"}


def test_clean_during_a_build_waits_for_it_and_the_build_passes(tmp_path):
    cache, folder = private_cache(tmp_path / "cache"), tmp_path / "sum"
    shutil.copytree(ROOT / "snippets" / "sum", folder)
    (folder / "sum.cpp").write_text((folder / "sum.cpp").read_text() + "\n// a source of this test's own\n")
    slow = tmp_path / "slow-c++"  # a compile that takes its time: clean starts while the build still holds its lock
    slow.write_text(f"#!/bin/sh\ncase \"$*\" in *c++-header*) ;; *\" -c \"*) sleep 4 ;; esac\n"
                    f"exec {shutil.which(os.environ.get('CXX', 'c++'))} \"$@\"\n")
    slow.chmod(0o755)
    build = subprocess.Popen([*KPLAY, "run", str(folder), "--device", "cpu", "--n", "1e3", "--no-bench"],
                             env={**env(cache), "CXX": str(slow)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    deadline = time.monotonic() + 60
    while not any(cache.glob("locks/kplay_sum_cpp_*.lock")) and time.monotonic() < deadline:  # compiling now
        time.sleep(0.05)
    clean = subprocess.run([*KPLAY, "clean"], env=env(cache), capture_output=True, text=True, timeout=120)
    output, _ = build.communicate(timeout=120)
    assert build.returncode == 0, output
    assert clean.returncode == 0 and "waiting for the builds in flight to finish: kplay_sum_cpp_" in clean.stderr, clean.stderr
    assert not any(cache.glob("kplay_sum_cpp_*")), "clean ran after the build and removed it"


@pytest.mark.parametrize("cache", ["/proc/kplay-cache", pytest.param("/sys/kernel/kplay-cache", marks=pytest.mark.slow)])
def test_an_unwritable_cache_is_one_line_and_exit_2(cache, kplay, monkeypatch):
    """Paths even root cannot write (chmod does not stop root)."""
    monkeypatch.setenv("KPLAY_CACHE", cache)
    result = subprocess.run([*KPLAY, "run", "sum", "--device", "cpu", "--n", "1e3", "--no-bench"],
                            env=env(Path(cache)), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: the build cache {cache} is not writable") and "KPLAY_CACHE" in result.stderr
    doctor = kplay("doctor")
    assert doctor.exit_code == 1 and "not writable" in doctor.output


def test_clean_says_what_it_removed(kplay, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("KPLAY_CACHE", str(cache))
    (cache / "kplay_x_y_0123").mkdir(parents=True)
    (cache / "kplay_x_y_0123" / "lib.so").write_bytes(b"x" * 200_000)
    result = kplay("clean")
    assert result.exit_code == 0 and f"removed 0.2 MB from {cache}" in result.stdout
    assert [p.name for p in cache.iterdir()] == [".kplay-cache.lock"]


def test_nvcc_gets_the_arch_flags_whatever_the_folders_are_called():
    """torch adds no arch flag when any CUDA flag holds "arch" (a folder named research, say): kplay gives them."""
    from playground.compiler.build import gencode

    assert gencode("9.0") == ["-gencode=arch=compute_90,code=sm_90"]
    assert gencode("9.0a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert gencode("8.0;8.6+PTX") == ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_86,code=sm_86",
                                      "-gencode=arch=compute_86,code=compute_86"]


def _hopper_only(tmp_path, arch: str | None):
    """print_array whose CUDA source also holds a wgmma fence: ptxas takes it for sm_90a alone."""
    import shutil

    from playground.family import registry

    fam = tmp_path / "hopper"
    shutil.copytree(ROOT / "snippets" / "print_array", fam, ignore=shutil.ignore_patterns("__pycache__"))
    with (fam / "print_array.cu").open("a") as cu:
        cu.write('\n__global__ void kplay_fence() { asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory"); }\n')
    if arch:
        toml = fam / "task.toml"
        toml.write_text(toml.read_text().replace('sources = ["print_array_cuda.cpp", "print_array.cu"]',
                                                 f'sources = ["print_array_cuda.cpp", "print_array.cu"]\narch = "{arch}"'))
    family = registry.load_family(fam)
    return family, family.variants["cuda"]


@pytest.mark.nvcc
@pytest.mark.slow  # two CUDA builds
def test_a_variant_builds_for_its_own_arch(tmp_path):
    """A variant's `arch` (9.0a: Hopper's wgmma) is what nvcc builds it for; without it, the process's 9.0."""
    from playground.compiler.build import build
    from playground.core.errors import BuildError

    family, variant = _hopper_only(tmp_path / "a", "9.0a")
    assert variant.arch == "9.0a" and build(family, variant, {})[1].name
    family, variant = _hopper_only(tmp_path / "b", None)
    with pytest.raises(BuildError) as e:
        build(family, variant, {})
    assert any("'wgmma.fence' not supported on .target 'sm_90'" in line for line in e.value.details), e.value.details


def test_a_variant_for_another_arch_is_refused_in_one_line(tmp_path, monkeypatch):
    import torch

    from playground.compiler.build import build
    from playground.core.errors import UsageError

    family, variant = _hopper_only(tmp_path, "9.0a")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100")
    with pytest.raises(UsageError, match=r"hopper/cuda is built for sm_90a only; this GPU \(NVIDIA A100\) is sm_80"):
        build(family, variant, {})


def test_a_ptxas_error_is_not_hidden_by_loop_remarks():
    """A loop remark names std::runtime_error; ptxas's error, printed before it, is the one kept."""
    from playground.compiler.build import compile_error
    from playground.family import registry

    fam = registry.find("print_array")
    remark = "/x/main.cpp:30:3: missed: not vectorized: statement can throw an exception: std::runtime_error::x"
    output = "\n".join(["ptxas /x/cuda.ptx, line 33; error   : Instruction 'wgmma.fence' not supported", *[remark] * 20])
    error = compile_error(output, fam, fam.variants["cuda"])
    assert error.details == ["ptxas /x/cuda.ptx, line 33; error   : Instruction 'wgmma.fence' not supported"]
