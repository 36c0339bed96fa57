"""Run a request in a child process, so a segfault, an abort or an endless loop cannot take kplay down."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import events
from ..core.errors import BuildError, KernelCrash, KplayError, UsageError
from . import group as sessions

if TYPE_CHECKING:  # a type, not an arrow: any request with to_json(), timeout and read_only will do
    from ..family.request import Request

KINDS = {"UsageError": UsageError, "BuildError": BuildError, "KernelCrash": KernelCrash}
STOP_POLL_S = 0.1  # how often a run asks stopped_by's callables
TOOL_GRACE_S = 120  # how long a tool may take to finish its report once the worker is done
SIGNALS = {signal.SIGSEGV: "segmentation fault", signal.SIGABRT: "abort", signal.SIGBUS: "bus error",
           signal.SIGFPE: "floating-point exception", signal.SIGILL: "illegal instruction",
           signal.SIGKILL: "killed (out of memory?)"}


def run(request: Request, on_event=events.ignore, under: list[str] = (), env: dict | None = None,
        writable: tuple[str, ...] = ()) -> dict:
    """The result record as a dict; a failure in the child comes back as the same KplayError.

    `under`: a tool (compute-sanitizer, ncu) that starts the worker, which then writes to a file (a tool need not
    pass a pipe on); `env`: what it adds to the worker's environment; `writable`: the folders the tool writes to.
    The worker asks this process for the device's lease (lock.Granted): no process of its own ever holds one.
    In the sandbox (sandbox.wanted()), the worker and all it starts run inside bubblewrap, within its limits.
    """
    box = _box(request)
    with tempfile.TemporaryFile() as log, tempfile.TemporaryDirectory(prefix="kplay-run-") as private:
        channel, grants = os.path.join(private, "channel"), _Grants(os.path.join(private, "grant"))
        Path(channel).touch()
        child, read = _start(request, log, channel, under, env, box, private, writable)
        over = _Clock(child, box.limits.wall_s if box else None)
        try:
            with _ending_kills_the_child():
                reply, phase = _listen(read, child, request.timeout, on_event, follow=bool(under), grants=grants)
                if under and not reply.get("timeout"):
                    _let_finish(child)
        finally:
            over.cancel()
            grants.close()
            os.close(read)
            if child.poll() is None:
                _kill_session(child.pid)
            child.wait()
            hit = box.hit(child.returncode, os.fstat(log.fileno()).st_size) if box else None
            if box:
                box.close()
        log.seek(0)
        tail = _messages(log.read().decode(errors="replace"))
    if over.rang:
        raise KernelCrash(f"the run took over {box.limits.wall_s:g} s, the sandbox's limit (KPLAY_SANDBOX_WALL_S), "
                          f"and was stopped {phase.removesuffix(READ_ONLY)}")
    if hit and "result" not in reply:
        raise KernelCrash(f"{hit}, {phase.removesuffix(READ_ONLY)}")
    if box and not reply and (said := next((t for t in tail if t.startswith("bwrap:")), None)):
        raise UsageError(f"the sandbox could not start the worker: {said}")
    return _outcome(request, reply, phase, child.returncode, tail)


def _outcome(request: Request, reply: dict, phase: str, code: int, tail: list[str]) -> dict:
    """The result, or the KplayError that tells what ended the worker: its own error, a timeout, a crash."""
    if "result" in reply:
        return reply["result"]
    if "error" in reply:
        err = reply["error"]
        if err["kind"] == "KernelCrash" and DEVICE_FAULT in err["message"] and phase.endswith(READ_ONLY):
            _wrote_its_input(request, phase.removesuffix(READ_ONLY), DEVICE_FAULT)
        error = KINDS.get(err["kind"], KplayError)(err["message"])
        error.details = err.get("details", [])
        raise error
    if reply.get("superseded"):
        raise Superseded(f"stopped {phase.removesuffix(READ_ONLY)}: a newer save came in")
    if reply.get("timeout"):
        raise KernelCrash(f"timed out {phase.removesuffix(READ_ONLY)}: a call of the kernel took over "
                          f"{request.timeout:g} s, and may never finish (--timeout allows more)")
    if code == -signal.SIGSEGV and phase.endswith(READ_ONLY):
        _wrote_its_input(request, phase.removesuffix(READ_ONLY), SIGNALS[signal.SIGSEGV])
    what = SIGNALS.get(-code, f"signal {-code}") if code < 0 else f"exit code {code}"
    crash = KernelCrash(f"kernel crashed: {what} {phase.removesuffix(READ_ONLY)}")
    crash.details = tail
    raise crash


READ_ONLY = " (its input read-only)"  # a phase whose inputs a write faults on (run/guard.py)
DEVICE_FAULT = "illegal memory access"  # what CUDA says of a write to read-only memory (and of other faults)


def _wrote_its_input(request: Request, phase: str, fault: str) -> None:
    """A fault (a segfault; on a GPU, an illegal memory access) where the input was read-only: the same run in
    writable memory tells a write to the input (restored or not) from another fault. Raises the KernelCrash
    that names it; returns if it was another fault."""
    try:
        run(dataclasses.replace(request, read_only=False))
    except KernelCrash as again:
        if fault in str(again):
            return
    except KplayError:
        pass
    raise KernelCrash(f"the kernel wrote to its input {phase}: the checked inputs are read-only, "
                      "and a write faults even if the kernel puts the values back")


def _let_finish(child) -> None:
    """A tool writes its report (ncu's CSV, the sanitizer's summary) after the worker has sent its result."""
    try:
        child.wait(timeout=TOOL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass


def _start(request: Request, log, channel: str, under: list[str], env: dict | None, box, private: str,
           writable: tuple[str, ...]):
    """The worker (under the tool, if any; in the sandbox, if any), the request on its stdin; returns it and
    the descriptor to read. Inside `warm()`, a plain run's worker is forked by the zygote instead."""
    grant = {GRANT: os.path.join(private, "grant")}
    if _zygote and not under and not env and not box and threading.current_thread() is _zygote.thread:
        read, write = os.pipe()
        try:
            return _zygote.start(request.to_json(), write, log.fileno(), grant), read
        except OSError:  # the zygote has gone: a fresh worker, as outside warm()
            os.close(read)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
    env = {**os.environ, **(env or {}), **grant, "PYTHONPATH": _pythonpath()}
    if under:
        read, target, fds = os.open(channel, os.O_RDONLY), "@" + channel, ()
    else:
        read, write = os.pipe()
        target, fds = str(write), (write,)
    argv = [*under, sys.executable, "-m", "playground.child.main", target]
    if box:
        argv, env = box.command(argv, writable=[private, *writable]), box.environment(env)
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=fds, env=env,
                             start_new_session=True)
    if not under:
        os.close(write)
    _send(child, request)
    return child, read


def _box(request: Request):
    """The sandbox for this run's worker (sandbox.Box), or None where none is wanted; a UsageError where one
    is wanted and cannot start."""
    from . import sandbox

    if not sandbox.wanted():
        return None
    if why := sandbox.unavailable():
        raise UsageError(why)
    from ..compiler.toolchain import cache_dir

    own = Path(os.environ.get(sandbox.OWN_CACHE_ENV) or cache_dir() / "sandboxed")  # a pool: one per student
    own.mkdir(parents=True, exist_ok=True)
    gpu = request.device != "cpu" and Path("/dev/nvidiactl").exists()
    return sandbox.Box(folder=Path(request.path).resolve() if request.path else None, own_cache=own.resolve(),
                       shared_cache=cache_dir().resolve(), gpu=gpu, gpu_minor=sandbox.gpu_minor() if gpu else None)


class _Clock:
    """The sandbox's wall-time limit: past it, the worker's session is killed and `rang` is set."""

    def __init__(self, child, limit: float | None):
        self.rang, self._timer = False, None
        if limit:
            self._timer = threading.Timer(limit, self._ring, (child,))
            self._timer.daemon = True
            self._timer.start()

    def _ring(self, child) -> None:
        self.rang = True
        _kill_session(child.pid)

    def cancel(self) -> None:
        if self._timer:
            self._timer.cancel()


GRANT = "KPLAY_GRANT"  # the FIFO a worker reads its leases' grants from (child/main.py)


class _Grants:
    """This process's end of the lease protocol: a worker's `lease` event asks for a device's lease (exclusive
    true or false) or gives it back (null); the answer, {"waited": s} or {"error": line}, goes down the FIFO."""

    def __init__(self, path: str):
        from ..run import lock

        os.mkfifo(path, 0o600)
        self.path, self.fd, self.leases = path, None, lock.Granted()

    def answer(self, child, device: str, exclusive: bool | None, on_event) -> None:
        if exclusive is None:
            self.leases.drop(device)
            return
        try:
            reply = {"waited": self.leases.take(device, exclusive, lambda: on_event(events.WAIT, device=device))}
        except UsageError as e:
            reply = {"error": str(e)}
        while self.fd is None and child.poll() is None:  # the worker opens its end as soon as it has asked
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.005)
        if self.fd is not None:
            with contextlib.suppress(BrokenPipeError):
                os.write(self.fd, (json.dumps(reply) + "\n").encode())

    def close(self) -> None:
        self.leases.close()
        if self.fd is not None:
            os.close(self.fd)


def _send(child, request: Request) -> None:
    with contextlib.suppress(BrokenPipeError):  # a worker that has died already: _listen reports how
        child.stdin.write(request.to_json().encode())
        child.stdin.close()


def _kill_session(pid: int) -> None:
    """The worker (a session leader), and every process of its session: ninja and its compilers too."""
    with contextlib.suppress(ProcessLookupError):  # a forked worker not yet leading its session, or gone
        os.kill(pid, signal.SIGKILL)
    sessions.kill(pid)


_zygote = None  # the warm worker, inside warm()


@contextmanager
def warm():
    """Inside this block each run forks from one warm worker (torch imported once: about 2 s saved per run),
    where fork is safe (Linux; not under a tool). Elsewhere, or with KPLAY_ZYGOTE=0, fresh workers.
    Yields the Zygote (an enclosing block's, if any), or None where runs start fresh workers."""
    global _zygote
    main = threading.current_thread() is threading.main_thread()  # the zygote dies with the thread that made it
    if _zygote or not main or not sys.platform.startswith("linux") or os.environ.get("KPLAY_ZYGOTE") == "0":
        yield _zygote if main else None  # a zygote serves only the thread that made it
        return
    _zygote = Zygote()
    try:
        yield _zygote
    finally:
        zygote, _zygote = _zygote, None
        zygote.close()


class Zygote:
    """kplay's end of playground.child.main --warm: start a run in a forked worker, and learn how that worker ended.
    One run at a time, from the thread that made it (run() elsewhere starts a fresh worker)."""

    def __init__(self):
        self.thread = threading.current_thread()
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, "PYTHONPATH": _pythonpath()}
        self.proc = subprocess.Popen([sys.executable, "-m", "playground.child.main", "--warm", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), env=env, start_new_session=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=None if os.environ.get("KPLAY_DEBUG") else subprocess.DEVNULL)
        theirs.close()
        self.ended: dict[int, int] = {}

    def start(self, request_json: str, events_fd: int, log_fd: int, env: dict) -> Forked:
        message = {"request": request_json, "env": {**os.environ, **env}, "cwd": os.getcwd()}
        socket.send_fds(self.sock, [json.dumps(message).encode()], [events_fd, log_fd])
        while True:
            reply = self._next(None)
            if "pid" in reply:  # a pid the system reused: the exit of its earlier child is not this one's
                self.ended.pop(reply["pid"], None)
                return Forked(self, reply["pid"])

    def _next(self, timeout: float | None) -> dict:
        """The zygote's next message (an ended child is kept in self.ended); {} on a timeout."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return {}
        data = self.sock.recv(1 << 16)
        if not data:
            raise OSError("the warm worker has gone")
        reply = json.loads(data)
        if "exit" in reply:
            self.ended[reply["exit"]] = reply["status"]
        return reply

    def close(self) -> None:
        self.sock.close()  # the zygote's loop ends on it
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Forked:
    """A worker forked by the zygote, with what run() asks of a Popen: pid, poll, wait, returncode."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def poll(self) -> int | None:
        return self.wait(timeout=0)

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pid not in self.zygote.ended:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                if not self.zygote._next(left) and left == 0:
                    return None
            except OSError:  # the zygote died, and its children with it
                self.zygote.ended[self.pid] = -signal.SIGKILL
        self.returncode = self.zygote.ended[self.pid]
        return self.returncode


def _pythonpath() -> str:
    return os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent.parent), os.environ.get("PYTHONPATH")]))


@contextmanager
def _ending_kills_the_child():
    """SIGTERM or SIGHUP (a closed terminal) ends kplay through its `finally`, which kills the worker's session."""
    def leave(signum, frame):
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    saved = {s: signal.signal(s, leave) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def _messages(log: str) -> list[str]:
    """What the dying process said (e.g. std::terminate's what()), without Python's stack dump."""
    noise = ("  File ", "Fatal Python error", "Current thread", "Thread 0x", "Extension modules", "Stack (most recent")
    lines = [ln for ln in log.strip().splitlines() if ln.strip() and not ln.startswith(noise)]
    return lines[-3:] if not os.environ.get("KPLAY_DEBUG") else log.strip().splitlines()


class Superseded(KplayError):
    """A run stopped because it no longer matters (kplay watch: a newer save); its child was killed."""


_STOP: list = []  # callables: one that returns True stops the run in flight (stopped_by)


@contextmanager
def stopped_by(newer):
    """Runs started inside end early, their child and its compilers killed, once newer() is True (kplay watch:
    a save during a run, which a hung kernel would otherwise hold until its --timeout)."""
    _STOP.append(newer)
    try:
        yield
    finally:
        _STOP.remove(newer)


def _ready(fd: int, wait: float | None) -> bool | None:
    """Whether fd has data within `wait` seconds (None: no limit); None once a stopped_by callable says stop."""
    while not any(newer() for newer in _STOP):
        step = wait if not _STOP else STOP_POLL_S if wait is None else min(wait, STOP_POLL_S)
        if select.select([fd], [], [], step)[0]:
            return True
        if wait is not None:
            wait -= step
            if wait <= 0:
                return False
    return None


def _phase(event: str, message: dict) -> str | None:
    """What the worker is doing, as a timeout or a crash names it ("while checking cpp at n=1")."""
    if event == events.BUILD_START:
        return f"while building {message['variant']}"
    if event == events.CHECK:
        return f"while checking {message['variant']} at {message['case']}" + (READ_ONLY if message.get("read_only") else "")
    if event == events.PHASE and message["phase"] in ("time", "profile"):
        return "while timing" if message["phase"] == "time" else "while profiling"
    return "while waiting for the device" if event == events.WAIT else None


def _listen(fd: int, child, timeout: float, on_event, follow: bool = False, grants=None) -> tuple[dict, str]:
    """Read events until the result; the timeout counts from the first phase after the builds.

    follow: fd is a file the worker appends to (under a tool); it ends when the tool has ended.
    """
    buffer, deadline, phase = b"", None, "while starting"
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if follow:
            chunk = os.read(fd, 65536)
            if not chunk and child.poll() is None:
                if wait == 0:
                    return {"timeout": True}, phase
                time.sleep(0.05)
                continue
        else:
            ready = _ready(fd, wait)
            if not ready:
                return {"superseded" if ready is None else "timeout": True}, phase
            chunk = os.read(fd, 65536)
        if not chunk:
            return {}, phase
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line)
            if "event" not in message:
                return message, phase
            event = message.pop("event")
            if event == events.LEASE:
                grants.answer(child, message["device"], message["exclusive"], on_event)
                continue
            phase = _phase(event, message) or phase
            if event in (events.CALL, events.ALIVE) or event == events.PHASE and message["phase"] != "check":
                deadline = time.monotonic() + timeout  # --timeout bounds one call of the kernel
            elif event in (events.RETURNED, events.CHECK, events.PHASE, events.WAIT):
                deadline = None  # the reference, the inputs and another run's timing are not the kernel's time
            if event not in (events.ALIVE, events.CALL, events.RETURNED):
                on_event(event, **message)
