"""The child process that runs a kernel: `python -m playground.child.main FD` (or `@FILE`), the request (JSON) on stdin;
or, with `--warm FD`, the warm worker (the zygote) that forks one such child per request.

Events and the result go to FD as JSON lines; the kernel's own stdout and stderr go wherever the
parent pointed them. Whatever the kernel does to this process, the parent survives it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import os
import select
import signal
import socket
import sys
import traceback
import warnings

from ..core import events
from . import sandbox
from .group import die_with_parent


def main() -> None:
    if sys.argv[1] == "--warm":
        return warm()
    sandbox.apply_rlimits()  # in the sandbox: before anything of the kernel's runs, the build included
    die_with_parent()
    target = sys.argv[1]
    out = open(target[1:], "w", buffering=1) if target.startswith("@") else os.fdopen(int(target), "w", buffering=1)
    prepare()
    serve(sys.stdin.read(), out, alone=target.startswith("@"))  # "@file": under a tool


def prepare() -> None:
    """What every worker sets before a kernel runs (a zygote sets it once, before it forks)."""
    faulthandler.enable()  # a segfault leaves a Python stack in the log
    warnings.filterwarnings("ignore")
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found" on CPU boxes


def serve(request_json: str, out, alone: bool = False) -> None:
    """Run one request; its events and then its result (or error) go to `out` as JSON lines.

    alone: under a tool (the sanitizer, ncu), as in a profile, the whole run holds the device's lease alone:
    its kernels run slowed, or replayed, for long, and would distort another run's timing."""
    from ..core.errors import KplayError
    from ..family.request import Request
    from ..run import runner

    def send(**message) -> None:
        out.write(json.dumps(message) + "\n")

    try:
        request = Request.from_json(request_json)
        on_event = lambda event, **data: send(event=event, **data)
        if os.environ.get("KPLAY_GRANT"):  # the supervisor holds the leases (spawn._Grants)
            from ..run import lock

            lock.supervisor = _ask_supervisor(send, os.environ["KPLAY_GRANT"])
        with _lease(request, alone or request.mode != "run", on_event):
            if request.mode == "run":
                result = runner.execute(request, on_event)
            else:
                from ..run import profile

                result = profile.execute(request, on_event)
        send(result=result.to_dict())
    except KplayError as e:
        send(error={"kind": type(e).__name__, "message": str(e), "details": getattr(e, "details", [])})
    except Exception as e:  # a bug in a spec or in kplay: one line, the stack in the log
        traceback.print_exc()
        send(error={"kind": "KernelCrash", "message": f"{type(e).__name__}: {e}".splitlines()[0],
                    "details": traceback.format_exc().splitlines()[-6:]})


def _ask_supervisor(send, fifo: str):
    """lock.supervisor: ask for a device's lease (exclusive true or false; None gives it back) and wait for the
    answer: the seconds waited, or the supervisor's one line (a UsageError)."""
    grants = []

    def ask(device: str, exclusive: bool | None) -> float:
        from ..core.errors import UsageError

        send(event=events.LEASE, device=device, exclusive=exclusive)
        if exclusive is None:
            return 0.0
        if not grants:
            grants.append(open(fifo, "rb", buffering=0))
        line = grants[0].readline()
        reply = json.loads(line) if line else {"error": "the run that started this worker has gone"}
        if "error" in reply:
            raise UsageError(reply["error"])
        return reply["waited"]

    return ask


def _lease(request, alone: bool, on_event):
    """The device's lease, held alone for the whole run, or nothing (the run takes its own: runner.execute)."""
    if not alone:
        return contextlib.nullcontext()
    from ..core.errors import UsageError
    from ..run import lock as lease
    from ..run import runner

    try:
        key = lease.of(runner.resolve_device(request.device, request.load_family(), request.variant))
    except UsageError:  # no such device here: the run itself says so, in its own words
        return contextlib.nullcontext()
    return lease.held(key, exclusive=True, on_wait=lambda: on_event(events.WAIT, device=key))


# ---- the warm worker --------------------------------------------------------------------------------------
# The warm worker: one process that has imported torch, but not initialised CUDA, forks the child for each run.
# 
# `--warm FD`, FD a Unix socket (SOCK_SEQPACKET) to kplay. A request is one message, the
# run's JSON with two descriptors beside it (SCM_RIGHTS): the pipe for its events and the file for its stdout
# and stderr. The zygote forks. The child leads a session of its own (kplay kills it and its compiler
# together), dies with the zygote, which dies with kplay, and serves the request as a fresh worker would. The
# zygote answers {"pid": P} at once and {"exit": P, "status": S} once the child has ended (S as Popen's
# returncode: the exit code, or minus the signal).

REAP_S = 0.02  # how often the zygote looks for an ended child while one runs


def warm() -> None:
    """The zygote's loop: fork a child for each request, report each one's end."""
    sock = socket.socket(fileno=int(sys.argv[2]))  # --warm FD
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is kplay's: it kills the child and closes the socket
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no zygote outlives kplay
    from ..run import runner  # noqa: F401  what every child would import: torch, the engine

    prepare()
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
        die_with_parent()
        os.environ.clear()
        os.environ.update(message["env"])
        threads = os.environ.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:  # OpenMP read it when the zygote imported torch, as it was then
            import torch

            torch.set_num_threads(int(threads))
        os.chdir(message["cwd"])
        serve(message["request"], os.fdopen(events, "w", buffering=1))
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
