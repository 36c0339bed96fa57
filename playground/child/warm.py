"""The warm worker: one process that has imported torch, but not initialised CUDA, forks the child for each run.

`python -m playground.child.warm FD`, FD a Unix socket (SOCK_SEQPACKET) to kplay. A request is one message, the
run's JSON with two descriptors beside it (SCM_RIGHTS): the pipe for its events and the file for its stdout
and stderr. The zygote forks. The child leads a session of its own (kplay kills it and its compiler
together), dies with the zygote, which dies with kplay, and serves the request as a fresh worker would. The
zygote answers {"pid": P} at once and {"exit": P, "status": S} once the child has ended (S as Popen's
returncode: the exit code, or minus the signal).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import traceback

REAP_S = 0.02  # how often the zygote looks for an ended child while one runs


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is kplay's: it kills the child and closes the socket
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no zygote outlives kplay
    from ..run import runner  # noqa: F401  what every child would import: torch, the engine
    from . import main as worker

    worker.prepare()
    import torch

    if torch.cuda.is_initialized():  # a fork would then be unsafe: kplay starts fresh workers instead
        return
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], REAP_S if children else None)
        if ready and not _fork(sock, children):
            return  # kplay closed the socket
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                sock.send(json.dumps({"exit": pid, "status": _returncode(status)}).encode())


def _fork(sock, children: set[int]) -> bool:
    """Fork a child for the next request; False when kplay has gone."""
    message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
    if not message:
        return False
    pid = os.fork()
    if pid == 0:
        _child(sock, json.loads(message), fds)
    for fd in fds:
        os.close(fd)
    children.add(pid)
    sock.send(json.dumps({"pid": pid}).encode())
    return True


def _child(sock, message: dict, fds: list[int]) -> None:
    """The forked worker: its own session, kplay's environment and folder, the request served; never returns."""
    code = 1
    try:
        sock.close()
        os.setsid()
        events, log = fds
        os.dup2(log, 1)
        os.dup2(log, 2)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        from . import main as worker

        worker.die_with_parent()
        os.environ.clear()
        os.environ.update(message["env"])
        threads = os.environ.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:  # OpenMP read it when the zygote imported torch, as it was then
            import torch

            torch.set_num_threads(int(threads))
        os.chdir(message["cwd"])
        worker.serve(message["request"], os.fdopen(events, "w", buffering=1))
        code = 0
    except BaseException:  # before serve() took over: the log gets the stack, kplay says "while starting"
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


if __name__ == "__main__":
    main()
