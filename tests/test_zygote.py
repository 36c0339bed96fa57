"""The warm worker (isolate.warm): runs fork from one process that imported torch, a crash or a hang costs only
that child, and the zygote and its children die with kplay."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, private_cache
from playground.child import spawn as isolate
from playground.family import request
from playground.core.errors import KernelCrash
from test_workshop import _ours

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork from a zygote: Linux only")
own_zygote = pytest.mark.usefixtures("cold")  # not the session's warm worker (conftest): the test starts its own, or none


def sum_run(target="sum", **kw):
    return isolate.run(request.make(str(target), device="cpu", sizes={"n": "100"}, skip_baselines=["torch.sum"], **kw))


def test_the_child_sees_kplays_environment_at_each_run(monkeypatch, tmp_path):
    with isolate.warm():  # the session's warm worker (first here: the others end it)
        assert sum_run()["ok"]
        monkeypatch.setenv("KPLAY_CACHE", str(private_cache(tmp_path / "later")))  # set after the zygote started
        r = sum_run()
    assert not r["variants"][0]["build"]["cached"] and any((tmp_path / "later").glob("kplay_sum_cpp_*"))


def test_the_child_takes_the_thread_count_kplay_asks_for_now(monkeypatch, tmp_path):
    """OMP_NUM_THREADS set after the zygote imported torch (whose OpenMP read it then) still holds in the child."""
    folder = tmp_path / "sum"
    shutil.copytree(ROOT / "snippets" / "sum", folder)
    with open(folder / "spec.py", "a") as f:
        f.write("\n\ndef extra(ops, variant, inputs):\n    return {'threads': str(torch.get_num_threads())}\n")
    with isolate.warm():  # the session's warm worker, started before this test
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        r = sum_run(folder)
    assert r["variants"][0]["extra"] == {"threads": "1"}


@pytest.mark.slow  # -m "not slow": every CLI test's run forks from the session's warm worker (conftest)
@own_zygote
def test_warm_runs_fork_from_one_process_and_give_the_same_record(monkeypatch):
    cold = sum_run()
    started = []
    popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a[0]) or popen(*a, **k))
    with isolate.warm():
        warm = [sum_run() for _ in range(3)]
    assert len(started) == 1 and "--warm" in started[0]  # the zygote alone: no fresh worker
    assert all(r["ok"] and r["variants"][0]["check"] == cold["variants"][0]["check"] for r in warm)


@own_zygote
def test_a_crash_or_a_hang_costs_only_its_child(wrong_kernel):
    with isolate.warm() as zygote:
        with pytest.raises(KernelCrash, match="segmentation fault while checking cpp"):
            sum_run(wrong_kernel("sum", "sum_segfault.cpp"))
        with pytest.raises(KernelCrash, match="a call of the kernel took over 2 s"):
            sum_run(wrong_kernel("sum", "sum_hang.cpp"), timeout=2)
        assert sum_run()["ok"] and zygote.proc.poll() is None  # the same zygote, still serving
    assert zygote.proc.poll() is not None  # and gone with the block


@own_zygote
def test_a_zygote_that_died_falls_back_to_a_fresh_worker():
    with isolate.warm() as zygote:
        zygote.proc.kill()
        zygote.proc.wait()
        assert sum_run()["ok"]


@pytest.mark.slow
@own_zygote
def test_killing_kplay_kills_the_zygote_and_a_hanging_child(wrong_kernel, tmp_path):
    folder, cache = wrong_kernel("sum", "sum_hang.cpp"), private_cache(tmp_path / "cache")
    script = textwrap.dedent(f"""
        from playground.child import spawn as isolate
        from playground.family import request
        with isolate.warm():
            isolate.run(request.make({str(folder)!r}, device="cpu", sizes={{"n": "100"}}, timeout=600))
    """)
    env = {**os.environ, "KPLAY_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    kplay = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while len(_ours(cache)) < 3:  # kplay, the zygote, the hanging child
        assert time.monotonic() < deadline and kplay.poll() is None, _ours(cache)
        time.sleep(0.2)
    time.sleep(1)  # inside the kernel's loop
    kplay.send_signal(signal.SIGKILL)
    kplay.wait()
    deadline = time.monotonic() + 5
    while _ours(cache) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _ours(cache), "left running"


@pytest.mark.slow  # a table of every pid the system has (4M) and a kernel that hangs
@own_zygote
def test_a_reused_pid_does_not_inherit_an_earlier_childs_exit(wrong_kernel, tmp_path, monkeypatch):
    """The zygote reports each child's exit by pid; a pid the system hands out again must not find the old
    status, or a hanging kernel's timeout would never kill it."""
    folder, cache = wrong_kernel("sum", "sum_hang.cpp"), private_cache(tmp_path / "cache")
    monkeypatch.setenv("KPLAY_CACHE", str(cache))
    pid_max = int(open("/proc/sys/kernel/pid_max").read())
    with isolate.warm() as zygote:
        zygote.ended.update(dict.fromkeys(range(1, min(pid_max, 1 << 22) + 1), 0))  # every pid "ended"
        with pytest.raises(KernelCrash, match="a call of the kernel took over 2 s"):
            sum_run(folder, timeout=2)
        time.sleep(0.5)
        assert len(_ours(cache)) == 1, _ours(cache)  # the zygote alone: the hanging child was killed
