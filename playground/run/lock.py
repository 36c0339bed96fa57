"""Leases on a machine's devices (a GPU by its UUID, or the CPU): shared for builds and checks, exclusive for a timing.

Each lease is an OS lock (flock) on a file in a folder every user of the machine can write, so it dies with
its holder: a killed kplay never blocks a device. A GPU is named by its UUID, so containers that see it under
other indices share one lease. It is fair to a timing: an exclusive request first takes the device's gate,
and a shared one passes the gate before it takes the lease, so a stream of shared holders (a class's checks)
queues behind a waiting timing instead of starving it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator



def folder() -> Path:
    """$KPLAY_LEASES, else /tmp/kplay-leases: made sticky and writable by everyone, as /tmp is."""
    path = Path(os.environ.get("KPLAY_LEASES") or "/tmp/kplay-leases")
    try:
        path.mkdir(mode=0o777, parents=True)
        path.chmod(0o1777)  # mkdir's mode is cut by the umask
    except FileExistsError:
        pass
    return path


def _open(name: str) -> int:
    """The lock file, readable and writable by every user (the first user's umask would keep others out)."""
    fd = os.open(folder() / name, os.O_RDWR | os.O_CREAT, 0o666)
    if os.fstat(fd).st_mode & 0o666 != 0o666:
        try:
            os.fchmod(fd, 0o666)
        except PermissionError:  # another user's file, made before this rule: flock still works on it
            pass
    return fd


_HELD: dict[str, bool] = {}  # this process's leases: device -> exclusive
WAIT_S = float(os.environ.get("KPLAY_LEASE_WAIT_S", 1800))  # the longest wait for a lease; then one line, who holds it
supervisor = None  # in a worker: asks the process that started it for a lease (child/main.py sets it), or None


@contextmanager
def held(device: str, exclusive: bool, on_wait: Callable[[], None] | None = None) -> Iterator[float]:
    """Hold the device's lease; yields the seconds spent waiting for it. on_wait() is called once if it must wait.

    Inside a lease this process holds exclusive (a run under the sanitizer or the profiler), any lease on the
    same device is already held: an flock of a second open file would wait for the first.
    """
    if _HELD.get(device) or (device in _HELD and not exclusive):
        yield 0.0
        return
    if supervisor:  # the supervisor holds it: no process of the kernel's can hold it, or keep it by a fork
        waited = supervisor(device, exclusive)
        _HELD[device] = exclusive
        try:
            yield waited
        finally:
            _HELD.pop(device, None)
            supervisor(device, None)
        return
    key = re.sub(r"[^\w.-]", "_", device)
    gate, lease = _open(f"{key}.gate"), _open(f"{key}.lease")
    start, said = time.monotonic(), []
    once = (lambda: said or said.append(on_wait())) if on_wait else None  # one "waiting" for both locks
    try:
        _take(gate, fcntl.LOCK_EX, once, device, start)  # in the queue: no new shared holder passes while a timing waits
        _take(lease, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, once, device, start)
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        _HELD[device] = exclusive
        yield time.monotonic() - start
    finally:
        _HELD.pop(device, None)
        os.close(lease)  # closing drops the locks
        os.close(gate)


def _take(fd: int, mode: int, on_wait, device: str, start: float) -> None:
    """flock within WAIT_S of `start`; past it, a UsageError naming the holders. The wait is a blocking flock
    (the kernel queues it, and /proc/locks shows it) in a thread of its own, so that it can be given up."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        if on_wait:
            on_wait()
    done, failed = threading.Event(), []

    def wait():
        try:
            fcntl.flock(fd, mode)
        except OSError as e:
            failed.append(e)
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    if done.wait(max(0.0, WAIT_S - (time.monotonic() - start))):
        if failed:
            raise failed[0]
        return
    from ..core.errors import UsageError

    raise UsageError(f"waited {WAIT_S:g} s for the {device} lease, held by {holders(fd) or 'a process out of sight'}: "
                     "end it, or set KPLAY_LEASE_WAIT_S")


def holders(fd: int) -> str:
    """The processes holding a lock on fd's file, from /proc/locks: "pid 123 (python3 -m ...)"."""
    inode = os.fstat(fd).st_ino
    found = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        parts = line.split()
        if len(parts) > 5 and parts[5].rsplit(":", 1)[-1] == str(inode) and parts[4].isdigit():
            try:
                cmd = Path(f"/proc/{parts[4]}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                cmd = "?"
            found.append(f"pid {parts[4]} ({cmd[:60]})")
    return ", ".join(dict.fromkeys(found))


class Granted:
    """The supervisor's side: leases taken for a worker at its request, all given back when it ends."""

    def __init__(self):
        self._held: dict[str, contextlib.ExitStack] = {}

    def take(self, device: str, exclusive: bool, on_wait=None) -> float:
        self.drop(device)
        stack = contextlib.ExitStack()
        waited = stack.enter_context(held(device, exclusive, on_wait))
        self._held[device] = stack
        return waited

    def drop(self, device: str) -> None:
        stack = self._held.pop(device, None)
        if stack:
            stack.close()

    def close(self) -> None:
        for device in list(self._held):
            self.drop(device)


def gpu(index: int) -> str:
    """The lease name of a visible GPU: its UUID, the same from every container that sees it."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return f"gpu-{uuid}" if uuid else f"gpu-{index}"


def of(device: str) -> str:
    """The lease name of a run's device: "cpu", or the current GPU's (gpu())."""
    import torch

    return gpu(torch.cuda.current_device()) if device == "cuda" else device


def is_shared(path: Path) -> bool:
    """Whether a lease folder is one every user can write (and none can delete another's files in)."""
    mode = path.stat().st_mode
    return mode & 0o777 == 0o777 and bool(mode & stat.S_ISVTX)
