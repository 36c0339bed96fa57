"""The child process that runs a kernel: `python -m playground.child.main FD` (or `@FILE`), the request (JSON) on stdin.

Events and the result go to FD as JSON lines; the kernel's own stdout and stderr go wherever the
parent pointed them. Whatever the kernel does to this process, the parent survives it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
import warnings

from ..core import events
from . import group as sessions


def die_with_parent() -> None:
    """This worker and its build die with kplay: killed, its process group killed, or its terminal closed.

    The worker leads a session of its own (so a timeout can kill it and its compiler together), so nothing
    would stop it when kplay goes. On Linux the kernel sends it SIGTERM when kplay dies; elsewhere a thread
    notices. Either way the whole session goes: the worker, ninja and the compiler.
    """
    parent = os.getppid()

    def end_session(*_):
        sessions.kill(os.getsid(0))

    signal.signal(signal.SIGTERM, end_session)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        end_session()

    threading.Thread(target=watch, daemon=True).start()


def main() -> None:
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
    from ..run import runner
    from ..core.errors import KplayError
    from ..family.request import Request

    def send(**message) -> None:
        out.write(json.dumps(message) + "\n")

    try:
        request = Request.from_json(request_json)
        on_event = lambda event, **data: send(event=event, **data)
        with _lease(request, alone or request.mode != "run", on_event):
            if request.mode == "run":
                result = runner.execute(request, on_event)
            else:
                from ..insight import profile

                result = profile.execute(request, on_event)
        send(result=result.to_dict())
    except KplayError as e:
        send(error={"kind": type(e).__name__, "message": str(e), "details": getattr(e, "details", [])})
    except Exception as e:  # a bug in a spec or in kplay: one line, the stack in the log
        traceback.print_exc()
        send(error={"kind": "KernelCrash", "message": f"{type(e).__name__}: {e}".splitlines()[0],
                    "details": traceback.format_exc().splitlines()[-6:]})


def _lease(request, alone: bool, on_event):
    """The device's lease, held alone for the whole run, or nothing (the run takes its own: runner.execute)."""
    if not alone:
        return contextlib.nullcontext()
    from ..run import lock as lease, runner
    from ..core.errors import UsageError

    try:
        key = lease.of(runner.resolve_device(request.device, request.load_family(), request.variant))
    except UsageError:  # no such device here: the run itself says so, in its own words
        return contextlib.nullcontext()
    return lease.held(key, exclusive=True, on_wait=lambda: on_event(events.WAIT, device=key))


if __name__ == "__main__":
    main()
