"""Every process of a session, killed: the worker, ninja, and each compiler ninja started in a process group
of its own (POSIX_SPAWN_SETPGROUP), which killing the worker's group misses; all keep the worker's session."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path


def members(sid: int) -> list[int]:
    """The pids whose session is sid, from /proc (Linux); elsewhere none are found."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rpartition(")")[2].split()  # after the command's name, which may hold spaces
            if int(fields[3]) == sid and fields[0] != "Z":  # state, ppid, pgrp, session; a zombie is dead already
                found.append(int(stat.parent.name))
    return found


def kill(sid: int) -> None:
    """SIGKILL the session's process group and every other process of the session (this one last, if in it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL) if sid != os.getpgid(0) else None
    me = os.getpid()
    for _ in range(5):  # again while any is left: a compiler's driver may have started its next stage meanwhile
        others = [pid for pid in members(sid) if pid != me]
        if not others:
            break
        for pid in others:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    if os.getsid(0) == sid:
        os.killpg(os.getpgid(0), signal.SIGKILL)


def die_with_parent() -> None:
    """This worker and its build die with kplay: killed, its process group killed, or its terminal closed.

    The worker leads a session of its own (so a timeout can kill it and its compiler together), so nothing
    would stop it when kplay goes. On Linux the kernel sends it SIGTERM when kplay dies; elsewhere a thread
    notices. Either way the whole session goes: the worker, ninja and the compiler.
    """
    parent = os.getppid()

    def end_session(*_):
        kill(os.getsid(0))

    signal.signal(signal.SIGTERM, end_session)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        end_session()

    threading.Thread(target=watch, daemon=True).start()
