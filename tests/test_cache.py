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
    build = subprocess.Popen([*KPLAY, "run", str(folder), "--device", "cpu", "--n", "1e3", "--no-bench"],
                             env=env(cache), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
