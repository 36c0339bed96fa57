"""Shared fixtures: a private build cache, the warm worker, CLI runner, the known-wrong kernels; the slow-test report."""

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
WRONG = Path(__file__).resolve().parent / "wrong"
REPORT_S = 10  # an unmarked test (setup, call and teardown) longer than this is listed at the end
FAIL_S = 30  # and one longer than this fails the run: mark it `slow`, or make it faster
EXEMPT = ("slow", "cuda")  # marks that take a test out of both: the GPU box's -m cuda is not the 2-core loop


def gpu() -> bool:
    import torch

    return torch.cuda.is_available()


# The longest files first (their tests' seconds here, most first): with `-n 2 --dist loadfile` a long file that
# starts last keeps one core busy while the other idles. The order within a file is kept.
LONGEST = ["test_wrong.py", "test_linear.py", "test_pool.py", "test_exercise.py", "test_lltm.py", "test_workshop.py",
           "test_zygote.py", "test_lease.py", "test_laptop.py", "test_layout.py"]


def pytest_collection_modifyitems(config, items):
    from playground.compiler.toolchain import cuda_home

    rank = {name: k for k, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST)))

    skips = {"cuda": not gpu() and pytest.mark.skip(reason="needs an NVIDIA GPU"),
             "nvcc": cuda_home() is None and pytest.mark.skip(reason="needs nvcc, the CUDA toolkit")}
    for item in items:
        for marker, skip in skips.items():
            if skip and marker in item.keywords:
                item.add_marker(skip)


# The session's one build cache, which the xdist workers inherit: a source is built once, and kplay's file
# locks make sharing it safe. Set in the controller (the only process without xdist), before any worker starts.
PRECOMPILE = """import sys, time; t = time.perf_counter()
from pathlib import Path
from playground.compiler import build
from playground.family import registry
for name in ('lltm', 'sum'):  # ATen's headers (the longer, which the first lltm and linear tests wait for), then the stable ABI's
    f = registry.find(name)
    build.precompile(f, f.variants['cpp'])
    if name == 'lltm':  # when ATen's were ready, written whole
        Path(sys.argv[1] + '.part').write_text(str(time.time()))
        Path(sys.argv[1] + '.part').rename(sys.argv[1])
print(f'{time.perf_counter() - t:.1f}')"""
ATEN_READY = "aten-ready"  # the file, in the session's cache, that says when
_SETUP = pytest.StashKey[tuple]()  # the cache's folder, the precompiling process and when it started
_CHARGED = pytest.StashKey[list]()  # (seconds, node) of each unmarked test, as the session ended


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # each worker's own device leases: one worker's builds would otherwise hold
        os.environ["KPLAY_LEASES"] += "/" + config.workerinput["workerid"]  # back the other's timings (test_lease.py
        return  # has runs that share one)
    path = Path(tempfile.mkdtemp(prefix="kplay-test-cache-"))
    os.environ["KPLAY_CACHE"] = str(path)
    os.environ["KPLAY_LEASES"] = str(path / "leases")
    os.environ.setdefault("KPLAY_BUDGET_S", "0.05")  # 30 samples or 0.05 s a contender: no test reads more
    for name in ("KPLAY_PATH", "KPLAY_DEBUG"):
        os.environ.pop(name, None)
    # The precompiled headers (one-off builds: ATen's 17-24 s, shared by lltm and linear; the stable ABI's 7-10 s,
    # by sum and print_array) are made in the background from the start, as a set-up step, not inside
    # whichever test would meet them first.
    config.stash[_SETUP] = path, subprocess.Popen([sys.executable, "-c", PRECOMPILE, str(path / ATEN_READY)],
                                                  cwd=ROOT, text=True,
                                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                  start_new_session=True), time.time()


def pytest_unconfigure(config):
    if _SETUP in config.stash:
        path, proc, _ = config.stash[_SETUP]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its compiler too, which writes into the folder removed next
        proc.wait()
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def cache():
    """The session's build cache, never the user's."""
    return Path(os.environ["KPLAY_CACHE"])


def private_cache(path: Path) -> Path:
    """A new build cache at `path` that shares the session's precompiled headers (a link, which clean unlinks)."""
    shared = Path(os.environ["KPLAY_CACHE"]) / "pch"
    shared.mkdir(parents=True, exist_ok=True)
    path.mkdir(parents=True)
    (path / "pch").symlink_to(shared)
    return path


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A build cache of this test's own, for a test that empties or damages it (the session's is shared)."""
    monkeypatch.setenv("KPLAY_CACHE", str(private_cache(tmp_path / "own-cache")))
    return tmp_path / "own-cache"


class _Warm:
    """The warm worker the tests' runs fork from, while it is up."""
    stack, zygote = contextlib.ExitStack(), None

    @classmethod
    def close(cls):
        cls.stack.close()
        cls.zygote = None


@pytest.fixture(autouse=True)
def warm(request, cache):
    """Every run forks from one worker that has imported torch (isolate.warm, as `kplay watch` does): about 2 s
    less per `kplay run`. A test that needs fresh workers, or a warm worker of its own, asks for `cold`."""
    from playground.child import spawn as isolate

    if "cold" in request.fixturenames:
        _Warm.close()
    elif _Warm.zygote is None or _Warm.zygote.proc.poll() is not None:  # none yet, or a test ended it
        _Warm.close()
        _Warm.zygote = _Warm.stack.enter_context(isolate.warm())
    return _Warm.zygote


@pytest.fixture
def cold():
    """No warm worker during this test: each run starts a fresh one."""


def pytest_sessionfinish(session):
    _Warm.close()
    session.config.stash[_CHARGED] = _charged(session.config)  # once: the summary lists what the status judged
    if _too_slow(session.config, FAIL_S) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_durations: dict[str, list] = {}  # nodeid -> [seconds, marked, setup's (start, stop)], over setup, call and teardown


def pytest_runtest_logreport(report):
    seen = _durations.setdefault(report.nodeid, [0.0, any(m in report.keywords for m in EXEMPT), (0.0, 0.0)])
    seen[0] += report.duration
    if report.when == "setup":
        seen[2] = report.start, report.stop
    # KPLAY_FAILURE_LOG=FILE: each failure's report as it comes, for a run that a time limit may cut before
    # pytest's summary (benchmarks/gpu_all.sh). With xdist, the controller writes (workers pass reports on).
    if report.failed and (log := os.environ.get("KPLAY_FAILURE_LOG")) and "PYTEST_XDIST_WORKER" not in os.environ:
        with open(log, "a") as f:
            f.write(f"{report.nodeid} ({report.when})\n{report.longreprtext}\n\n")


def _precompiled(config) -> tuple[str | None, float, float] | None:
    """The background set-up step: what it said once ended (None while it runs), when it started, and when ATen's
    headers were ready (now, while it makes them; its start, if it never did)."""
    if _SETUP not in config.stash:
        return None
    path, proc, start = config.stash[_SETUP]
    running = proc.poll() is None
    if not running and not hasattr(proc, "said"):
        out, err = proc.communicate()
        proc.said = (f"the headers precompiled in the background in {out.strip()} s" if proc.returncode == 0
                     else f"the headers were not precompiled: {(err.strip() or '?').splitlines()[-1]}")
    if not hasattr(proc, "ready") and (path / ATEN_READY).exists():
        proc.ready = float((path / ATEN_READY).read_text())
    return None if running else proc.said, start, getattr(proc, "ready", time.time() if running else start)


def _charged(config) -> list[tuple[float, str]]:
    """Each unmarked test's seconds, slowest first; with xdist, the controller's count (workers say nothing).
    A test's set-up is not charged for the time it spent before ATen's headers were precompiled: the first lltm
    and linear builds (module fixtures) wait there, and a loaded machine can take a minute over them."""
    if hasattr(config, "workerinput"):
        return []
    _, start, ready = _precompiled(config) or (None, 0.0, 0.0)
    waited = lambda a, b: max(0.0, min(b, ready) - max(a, start))
    return sorted(((s - waited(*setup), node) for node, (s, slow, setup) in _durations.items() if not slow),
                  reverse=True)


def _too_slow(config, limit: float) -> list[tuple[float, str]]:
    """Unmarked tests over `limit` seconds, slowest first, as the session ended."""
    return [(s, node) for s, node in config.stash.get(_CHARGED, []) if s > limit]


def pytest_terminal_summary(terminalreporter, config):
    said = _precompiled(config)
    if said and said[0]:
        terminalreporter.line(f"set-up: {said[0]}")
    everything = _too_slow(config, 0.0)
    listed = [(s, node) for s, node in everything if s > REPORT_S]
    if listed:
        terminalreporter.section(f"unmarked tests over {REPORT_S} s, less waits for the set-up (over {FAIL_S} s fails)")
        for seconds, node in listed:
            terminalreporter.line(f"{seconds:6.1f}s {'FAIL ' if seconds > FAIL_S else ''}{node}")
    files = collections.Counter()
    for seconds, node in everything:
        files[node.split("::")[0]] += seconds
    if files:  # -m "not slow" has one budget in all (README): where it goes
        most = ", ".join(f"{Path(f).name} {s:.0f} s" for f, s in files.most_common(3))
        terminalreporter.line(f"unmarked tests: {sum(files.values()):.0f} s in all, the most in {most}")


@pytest.fixture
def kplay():
    """Invoke the CLI in-process with a fixed, colourless terminal; returns the click Result."""
    from cli import app

    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})

    return invoke


def wrong_folder(folder: Path, family: str, entry: dict) -> Path:
    """A copy of a built-in family in `folder` with one variant (entry's `variant`, default cpp), whose first
    source (or `source`) is the known-wrong one: tests/wrong/<family>/<file>, or the source with `patch` applied
    (pairs of old and new text).

    The copy keeps the family's name and the variant its own section of task.toml (flags and params): the same
    known-wrong kernel in two tests is one build.
    """
    import re

    from playground.family import registry

    variant = registry.find(family).variants[entry.get("variant", "cpp")]
    shutil.copytree(ROOT / "snippets" / family, folder)
    source = folder / entry.get("source", variant.sources[0])
    if "file" in entry:
        shutil.copy(WRONG / family / entry["file"], source)
    else:
        text, pairs = source.read_text(), entry["patch"]  # [old, new, old, new, ...]
        for old, new in zip(pairs[::2], pairs[1::2]):
            assert old in text, f"the patch no longer applies to {source.name}: {old!r}"
            text = text.replace(old, new)  # every place it is found
        source.write_text(text)
    toml = folder / "task.toml"
    sections = re.split(r"\n(?=\[)", toml.read_text())  # the header, then one chunk per [table]
    mine = (f"variants.{variant.name}]", f"variants.{variant.name}.")  # its table, its params and constraints
    keep = lambda s: not s.lstrip("[").startswith("variants.") or s.lstrip("[").startswith(mine)
    toml.write_text("\n".join(filter(keep, sections)))  # its params (the family's and its own) stay; the others go
    return folder


@pytest.fixture
def wrong_kernel(tmp_path):
    """make(family, file): a copy of a built-in family whose cpp variant's source is tests/wrong/<family>/<file>."""

    def make(family: str, file: str) -> Path:
        name = Path(file).name
        return wrong_folder(tmp_path / Path(name).stem / family, family, {"file": name})

    return make
