"""Every process of a session, killed: the worker, ninja, and each compiler ninja started in a process group
of its own (POSIX_SPAWN_SETPGROUP), which killing the worker's group misses; all keep the worker's session."""

from __future__ import annotations

import contextlib
import os
import signal
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
