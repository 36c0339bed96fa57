"""Device leases: an OS lock per device that dies with its holder, shared or exclusive, fair to a timing."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT
from playground.run import lock as lease

HOLD = """
import sys, time
from playground.run import lock as lease
with lease.held("cpu", exclusive=sys.argv[1] == "x"):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def leases(tmp_path, monkeypatch):
    monkeypatch.setenv("KPLAY_LEASES", str(tmp_path / "leases"))
    return tmp_path / "leases"


def holder(mode: str) -> subprocess.Popen:
    """Another process holding the CPU's lease, exclusive ("x") or shared ("s"), until it is killed."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, mode], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.stdout.readline().strip() == "held"
    return child


def taken_within(exclusive: bool, seconds: float) -> float | None:
    """The seconds this process waited for the lease, or None if it was not free within `seconds`."""
    got = []
    thread = threading.Thread(target=lambda: got.append(_take(exclusive)), daemon=True)
    thread.start()
    thread.join(seconds)
    return got[0] if got else None


def _take(exclusive: bool) -> float:
    with lease.held("cpu", exclusive) as waited:
        return waited


def test_a_killed_holder_frees_the_lease_at_once(leases):
    child = holder("x")
    try:
        assert taken_within(exclusive=False, seconds=0.5) is None
        began = time.monotonic()
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert taken_within(exclusive=True, seconds=2.0) is not None and time.monotonic() - began < 1.0
    finally:
        child.kill()


def test_shared_holders_share_and_a_timing_waits_for_them(leases):
    child = holder("s")
    try:
        assert taken_within(exclusive=False, seconds=1.0) is not None  # two checks at once
        assert taken_within(exclusive=True, seconds=0.5) is None  # a timing waits for the check
    finally:
        child.kill()


def test_a_waiting_timing_holds_back_new_shared_holders(leases):
    """A class's stream of checks cannot starve a timing: once it waits, a new check queues behind it."""
    first = holder("s")
    timing = subprocess.Popen([sys.executable, "-c", HOLD, "x"], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        time.sleep(1.0)  # the timing is waiting for the first check, at the gate's far side
        assert taken_within(exclusive=False, seconds=0.5) is None  # a new check waits behind the timing
        first.kill()
        assert timing.stdout.readline().strip() == "held"  # the timing goes first
    finally:
        first.kill()
        timing.kill()


def test_the_folder_is_every_users_and_the_wait_is_reported(leases):
    waited = []
    with lease.held("gpu-GPU-1234/5", exclusive=True, on_wait=lambda: waited.append(1)) as seconds:
        assert seconds < 0.5 and not waited
    assert lease.is_shared(leases)
    assert {p.name for p in leases.iterdir()} == {"gpu-GPU-1234_5.gate", "gpu-GPU-1234_5.lease"}
    assert all(p.stat().st_mode & 0o666 == 0o666 for p in leases.iterdir())


def kplay_run(*args: str, leases, **popen) -> subprocess.Popen:
    """`kplay run ...` as its own process, on a lease folder other runs share."""
    env = {**os.environ, "KPLAY_LEASES": str(leases), "COLUMNS": "80", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "run", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def blocked(path: Path, seconds: float = 60) -> bool:
    """Whether a process waits for an flock on `path` within `seconds` (/proc/locks lists the waiters, "->")."""
    inode, end = f":{path.stat().st_ino} ", time.monotonic() + seconds
    while time.monotonic() < end:
        if any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines()):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_a_run_waits_for_a_timing_and_says_how_long(leases):
    child = holder("x")  # another run timing on the CPU
    try:
        run = kplay_run("sum", "--n", "1000", leases=leases)
        assert blocked(leases / "cpu.gate")
        time.sleep(1.0)
    finally:
        child.kill()
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    waited = re.search(r"waited ([\d.]+) s for the CPU: another run was timing on it", out)
    assert waited and float(waited.group(1)) > 0.5, out


@pytest.mark.slow
def test_four_concurrent_runs_take_turns_in_their_timed_phases(leases):
    """The lease at work: four `kplay run sum --n 1e7` at once, and no two timed intervals overlap."""
    runs = [kplay_run("sum", "--n", "1e7", "--json", leases=leases) for _ in range(4)]
    records = [json.loads(run.communicate(timeout=300)[0]) for run in runs]
    assert all(r["ok"] for r in records)
    spans = sorted((r["lease"]["timed_from"], r["lease"]["timed_to"]) for r in records)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans
    assert all(r["lease"]["device"] == "cpu" and r["lease"]["waited_s"] >= 0 for r in records)
