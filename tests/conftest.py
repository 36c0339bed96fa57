"""Shared fixtures: a private build cache, CLI runner, and the known-wrong kernels."""

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
WRONG = Path(__file__).resolve().parent / "wrong"


def gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    from playground.toolchain import cuda_home

    skips = {"cuda": not gpu() and pytest.mark.skip(reason="needs an NVIDIA GPU"),
             "nvcc": cuda_home() is None and pytest.mark.skip(reason="needs nvcc, the CUDA toolkit")}
    for item in items:
        for marker, skip in skips.items():
            if skip and marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def cache(tmp_path_factory):
    """Builds go to a per-session temp dir, shared by the tests, never the user's cache."""
    path = tmp_path_factory.mktemp("kplay-cache")
    os.environ["KPLAY_CACHE"] = str(path)
    for name in ("KPLAY_PATH", "KPLAY_DEBUG"):
        os.environ.pop(name, None)
    return path


@pytest.fixture
def kplay():
    """Invoke the CLI in-process with a fixed, colourless terminal; returns the click Result."""
    from cli import app

    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})

    return invoke


@pytest.fixture
def wrong_kernel(tmp_path):
    """A copy of a built-in family whose C++ source is replaced by one from tests/wrong/ (e.g. "linear/x.cpp").

    The source takes the family's own name (linear.cpp, not linear_cuda.cpp), so a compile error points there.
    """

    def make(family: str, source: str) -> Path:
        folder = tmp_path / f"{family}-{Path(source).stem}"
        shutil.copytree(ROOT / "snippets" / family, folder)
        own = folder / f"{family}.cpp"
        target = own if own.exists() else sorted(folder.glob("*.cpp"))[0]
        for extra in folder.glob("*"):
            if extra.suffix in (".cpp", ".cu") and extra != target:
                extra.unlink()
        shutil.copy(WRONG / family / source if (WRONG / family / source).exists() else WRONG / source, target)
        text = (folder / "task.toml").read_text()
        (folder / "task.toml").write_text(text.split("\n[variants.")[0] + f'\n[variants.cpp]\ndevice = "cpu"\nsources = ["{target.name}"]\n')
        return folder

    return make
