"""The pool's student endpoint: HTTPS, one token per student; it grades a submission on the cluster for them.

Students never hold a Dask certificate. They send a started folder's kernel sources and their token; the
endpoint checks both, submits the grade to a free worker (`grade_files`, run there), writes the record to the
results folder under the token's name, then answers. The exercise's own task.toml and spec.py are the
worker's (kplay's), never the student's: only the files the student edits are taken from the submission.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import socket
import ssl
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ..child import sandbox
from ..core.errors import UsageError
from ..family.request import MAX_SEED
from .client import MAX_BYTES, MAX_FILE, size_text
from .cluster import write_whole

DRAIN = 16 << 20  # a body over MAX_BYTES is read (and dropped) up to this, so the client reads the 413
WAITING = 2  # a student's requests at once: more are refused (429), so one student cannot queue the GPUs
ANSWER_S = 3600.0  # the longest a request waits for its grade, queue included; then it is cancelled
CONNECTIONS = 256  # open connections at once; past it, an idle one is closed for the new one (_Server)
PER_ADDRESS = 64  # open connections from one address at once (a classroom behind one NAT fits)
HANDSHAKE_S = 5.0  # a TLS handshake not finished by then is dropped
IDLE_S = 60.0  # a connection that sends nothing for this long is dropped
CONNECTED, TLS, ASKED = 0, 1, 2  # a connection's stage: its handshake done, then its whole request read
EXERCISE = re.compile(r"[a-z][a-z0-9_]*/[a-z0-9][a-z0-9-]*")  # family/variant: built-in names, never a path


class Refused(Exception):
    """A request the endpoint answers with an HTTP error: (status, one line)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def editable(family: str, variant: str) -> tuple:
    """(family, variant, the file names a student may send) of a built-in exercise; Refused otherwise. A name
    is a built-in's, never a path: a family found elsewhere (a folder of the student's own, with its own
    tolerances) is refused."""
    from ..core.errors import KplayError
    from ..family import registry
    from ..workshop import exercise

    if not EXERCISE.fullmatch(f"{family}/{variant}"):
        raise Refused(400, f"not an exercise of this pool: {family}/{variant}"[:200])
    try:
        fam = registry.find(family)
        v = fam.variant(variant)
    except KplayError as e:
        raise Refused(400, f"not an exercise of this pool: {e}") from None
    if fam.path.resolve().parent != registry.BUILTIN:
        raise Refused(400, f"not an exercise of this pool: {family} is not one of kplay's own")
    if v.name not in exercise.exercises(fam):
        raise Refused(400, f"{family}/{variant} is not an exercise (kplay list marks them *)")
    return fam, v, {*v.sources, *v.includes}


def submission(body: dict) -> tuple:
    """(family, variant, files) of a request, every name and size checked."""
    if not isinstance(body.get("files"), dict) or not all(isinstance(t, str) for t in body["files"].values()):
        raise Refused(400, "a submission carries its files as {name: text}")
    fam, v, allowed = editable(str(body.get("family")), str(body.get("variant")))
    unknown = sorted(set(body["files"]) - allowed)
    if unknown:
        raise Refused(400, f"{fam.name}/{v.name} takes only {', '.join(sorted(allowed))}; not {', '.join(unknown)} "
                           f"(a folder started by another kplay: kplay start {fam.name}/{v.name} NEW-DIR with this "
                           "pool's kplay, then copy your edits into it)")
    big = [n for n, t in body["files"].items() if len(t.encode()) > MAX_FILE]
    if big:
        raise Refused(413, f"{big[0]}: a file is at most {MAX_FILE >> 10} KB "
                           f"(this one: {size_text(len(body['files'][big[0]].encode()))})")
    return fam, v, body["files"]


def grade_files(family: str, variant: str, files: dict, student: str, timeout: float, sanitize: bool,
                seed: int | None = None) -> dict:
    """On a worker: the exercise started afresh in a temporary folder, the student's files written over its
    starter, graded as `kplay check` grades (each kernel in kplay's child process); the worker named."""
    from ..core.errors import KplayError
    from ..workshop import exercise
    from ..workshop.folder import unusable
    from ..workshop.scaffold import eject

    fam, v, _ = editable(family, variant)  # the worker checks the names again: it trusts no caller
    with tempfile.TemporaryDirectory(prefix="kplay-grade-") as tmp:
        folder = Path(tmp) / "exercise"
        eject(fam, folder, [v], fam.parse_params([]), starter=True, exercise={"family": family, "variant": variant, "student": student,
                                                             "hints": []})
        for name, text in files.items():
            (folder / name).write_text(text)
        try:
            with sandbox.students_cache(student):
                rec = exercise.grade(folder, "cuda" if v.device == "cuda" else "cpu", student, lambda *a, **k: None,
                                     timeout, sanitize, seed)
        except KplayError as e:
            rec = unusable(folder, student, e)
    return rec | {"worker": _worker_name()}


FILE_NAME = re.compile(r"[\w.-]+(/[\w.-]+)?")  # a kernel folder's file: a name, or one folder deep
RUN_FIELDS = ("device", "variant", "dtype", "seed", "sizes", "params", "bench", "baselines", "skip_baselines",
              "one_baseline", "budget_s", "warnings", "given_params", "test_sizes", "own_dtypes")


def run_submission(body: dict) -> tuple[dict, dict]:
    """(request, files) of a `run --pool`: the request's own fields only (a run, never a tool's), and the files
    of a kernel folder (none for a built-in family: the pool's own)."""
    request, files = body.get("request"), body.get("files")
    if not isinstance(request, dict) or not isinstance(files, dict) or len(files) > 32:
        raise Refused(400, "a run carries its request and at most 32 files")
    bad = [n for n, t in files.items() if not FILE_NAME.fullmatch(n) or ".." in n.split("/") or not isinstance(t, str)]
    if bad:
        raise Refused(400, f"not a file name a kernel folder has: {bad[0]!r}")
    if any(len(t.encode()) > MAX_FILE for t in files.values()):
        raise Refused(413, f"a file is over {MAX_FILE >> 10} KB")
    if files and "task.toml" not in files:
        raise Refused(400, "a kernel folder's files include its task.toml")
    if not re.fullmatch(r"[\w-]{1,64}", str(request.get("family"))):
        raise Refused(400, "a family's name: letters, digits, '_' and '-'")
    if request.get("device") not in ("auto", "cpu", "cuda"):
        raise Refused(400, "device: auto, cpu or cuda")
    kept = {k: request[k] for k in RUN_FIELDS if k in request}
    return {"family": str(request.get("family")), "timeout": min(float(request.get("timeout") or 120.0), 600.0),
            **kept}, files


def run_files(request_json: str, files: dict, student: str) -> dict:
    """On a worker: the kernel folder written to a temporary folder (or the pool's built-in family), run in
    kplay's child as `kplay run` runs it: {"result"} or {"error"}, and the worker's name."""
    import dataclasses
    import tempfile

    from ..child import spawn as isolate
    from ..core.errors import KplayError
    from ..family import registry
    from ..family.request import Request

    raw = json.loads(request_json)
    with tempfile.TemporaryDirectory(prefix="kplay-run-") as tmp:
        folder = Path(tmp) / raw["family"] if files else None
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
        try:
            path = folder or registry.find(raw["family"]).path
            req = dataclasses.replace(Request(family=raw["family"], path=str(path)), **{k: v for k, v in raw.items()
                                                                                       if k != "family"})
            req = Request.from_json(req.to_json())  # lists back to tuples
            with sandbox.students_cache(student):
                reply = {"result": isolate.run(req)}  # "auto" takes this worker's GPU where the family has a CUDA variant
        except KplayError as e:
            reply = {"error": {"kind": type(e).__name__, "message": str(e), "details": getattr(e, "details", [])}}
    return reply | {"worker": _worker_name()}


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return "this machine"


class Endpoint:
    """Tokens checked, grades submitted to the cluster, records kept: the logic behind the HTTPS server."""

    def __init__(self, pool, scheduler: str):
        """pool: a pool.Pool (its tokens, results folder and the cluster's TLS)."""
        self.pool, self.scheduler, self._client, self._lock = pool, scheduler, None, threading.Lock()
        self._waiting: dict[str, int] = {}  # student -> requests in flight

    def student(self, token) -> str:
        """The token's student; Refused (401) for no token, or one this pool did not issue."""
        if not isinstance(token, str) or not token:
            raise Refused(401, "no token: kplay check DIR --pool TOKEN-FILE (the file your instructor gave you)")
        digest = hashlib.sha256(token.encode()).hexdigest()
        for known, name in self.pool.tokens().items():
            if hmac.compare_digest(known, digest):
                return name
        raise Refused(401, "this token is not one of this pool's (ask your instructor for yours)")

    @contextmanager
    def turn(self, student: str):
        """One of the student's WAITING requests at once; Refused (429) beyond them."""
        with self._lock:
            if self._waiting.get(student, 0) >= WAITING:
                raise Refused(429, f"you have {WAITING} requests waiting already: wait for their answers")
            self._waiting[student] = self._waiting.get(student, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._waiting[student] -= 1

    def client(self):
        """The endpoint's Dask client, connected again if the scheduler was restarted."""
        from distributed import Client

        with self._lock:
            if self._client is None or self._client.status != "running":
                if self._client is not None:
                    self._client.close()
                self._client = Client(self.scheduler, security=self.pool.security(), timeout=30,
                                      set_as_default=False)
            return self._client

    def grade(self, body: dict) -> dict:
        """One submission graded: the record, saved before it is returned."""
        student = self.student(body.get("token"))
        fam, v, files = submission(body)
        timeout = min(float(body.get("timeout") or 120.0), 600.0)
        seed = body.get("seed")
        if seed is not None and not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
            raise ValueError(f"seed {seed!r}: give a whole number from 0 to 2^62, or none")
        with self.turn(student):
            rec = self.submit(grade_files, (fam.name, v.name, files, student, timeout, bool(body.get("sanitize", True)),
                                            seed),
                              f"grade {student} {fam.name}/{v.name}", v.device == "cuda")
        self.save(student, fam.name, v.name, rec)
        return rec

    def run(self, body: dict) -> dict:
        """`kplay run --pool`: the request run on a worker (not kept: only grades are)."""
        student = self.student(body.get("token"))
        request, files = run_submission(body)
        gpu = True if request["device"] == "cuda" else None if request["device"] == "auto" else False
        with self.turn(student):
            return self.submit(run_files, (json.dumps(request), files, student), f"run {student} {request['family']}", gpu)

    def gpus(self) -> int:
        return sum(bool(w.get("resources", {}).get("GPU")) for w in self.client().scheduler_info()["workers"].values())

    def submit(self, fn, args: tuple, key: str, gpu: bool | None):
        """fn(*args) on a free worker (one with a GPU where `gpu`; None: where the pool has one); its value, or
        Refused when the pool cannot."""
        try:
            client = self.client()
            gpu = self.gpus() > 0 if gpu is None else gpu
            if gpu and not self.gpus():
                raise Refused(503, "this needs a GPU and the pool has no GPU worker now")
            future = client.submit(fn, *args, key=f"{key} {uuid.uuid4().hex[:6]}",
                                   resources={"GPU": 1} if gpu else {"GRADE": 1}, pure=False)
            try:
                return future.result(timeout=ANSWER_S)
            except TimeoutError:
                future.cancel()
                raise Refused(504, f"no answer within {ANSWER_S / 60:.0f} minutes (the pool is busy): send it again "
                                   "later") from None
        except Refused:
            raise
        except Exception as e:  # the scheduler restarted, or the grade killed its workers: never a silent wait
            from distributed import KilledWorker

            if not isinstance(e, KilledWorker):  # the connection may be what broke: the next request makes a new
                self.forget_client()  # one (a killed worker's grade is that one's alone: the others keep theirs)
            raise Refused(503, f"the pool lost this grade ({type(e).__name__}): send it again") from None

    def forget_client(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close(timeout=5)
            except Exception:  # a client whose scheduler is gone may fail to close: it is dropped all the same
                pass

    def save(self, student: str, family: str, variant: str, rec: dict) -> Path:
        """The latest record per student per exercise; every name in the path is the pool's, never the student's."""
        folder = (self.pool.results / student).resolve()
        if self.pool.results.resolve() not in folder.parents:
            raise Refused(500, "a student name outside the results folder")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{family}-{variant}.json"
        write_whole(path, json.dumps(rec, indent=2), 0o644)
        return path


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most CONNECTIONS of them and PER_ADDRESS from one address. When a new one
    finds no room, the idlest is closed for it: one that has not finished its TLS handshake, else one that has
    sent no whole request, the oldest first; never one whose request is being answered. A flood of idle
    connections then costs the students nothing but the flood's own slots."""

    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: socketserver's 5 drops a flood's SYNs, and a student's with them

    def __init__(self, *args):
        super().__init__(*args)
        self.open: dict = {}  # socket -> [address, opened at, stage]
        self.guard = threading.Lock()

    def process_request(self, request, client_address):
        with self.guard:
            if not self._room(client_address[0]):
                self.shutdown_request(request)
                return
            self.open[request] = [client_address[0], time.monotonic(), CONNECTED]
        super().process_request(request, client_address)

    def _room(self, address: str) -> bool:
        for limit, here in ((PER_ADDRESS, lambda v: v[0] == address), (CONNECTIONS, lambda v: True)):
            mine = [s for s, v in self.open.items() if here(v)]
            if len(mine) < limit:
                continue
            idle = [s for s in mine if self.open[s][2] < ASKED]
            if not idle:
                return False
            victim = min(idle, key=lambda s: (self.open[s][2], self.open[s][1]))
            del self.open[victim]
            with contextlib.suppress(OSError):
                victim.shutdown(socket.SHUT_RDWR)  # its thread's read ends, and the thread with it
        return True

    def stage(self, request, stage: int) -> None:
        with self.guard:
            if request in self.open:
                self.open[request][2] = stage

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.guard:
                self.open.pop(request, None)

    def handle_error(self, request, client_address):  # a dropped or stalled client: nothing to report
        pass


class _Handler(BaseHTTPRequestHandler):
    """One connection: its TLS handshake within HANDSHAKE_S, then POST /check or /run, answered by the server's
    endpoint (one JSON line, never a dropped connection)."""

    timeout = IDLE_S  # the socket's, once the handshake is done: a client that stalls its request is dropped

    def setup(self):
        self.request.settimeout(HANDSHAKE_S)
        self.request.do_handshake()
        self.server.stage(self.request, TLS)
        super().setup()

    def do_POST(self):
        try:
            if self.path not in ("/check", "/run"):
                raise Refused(404, f"no such request: {self.path}")
            size = int(self.headers.get("Content-Length") or 0)
            if not 0 <= size <= MAX_BYTES:
                self._drop(size)
                raise Refused(413, f"a submission is at most {MAX_BYTES >> 20} MB (this one: {size_text(size)})")
            body = json.loads(self.rfile.read(size) or b"{}")
            self.server.stage(self.request, ASKED)
            body = body if isinstance(body, dict) else {}
            endpoint = self.server.endpoint
            status, reply = 200, ({"record": endpoint.grade(body)} if self.path == "/check" else endpoint.run(body))
        except Refused as e:
            status, reply = e.status, {"error": str(e)}
        except (ValueError, UsageError) as e:
            status, reply = 400, {"error": str(e)[:500]}
        except Exception as e:  # never a dropped connection: the student is told something went wrong
            status, reply = 500, {"error": f"the pool failed on this request ({type(e).__name__}): send it again"}
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _drop(self, size: int) -> None:
        """Read and drop a body too large to take, up to DRAIN, so that a client still sending it reads the
        refusal instead of a reset connection; beyond DRAIN, the connection closes after the answer."""
        left = min(max(size, 0), DRAIN)
        while left > 0 and (chunk := self.rfile.read(min(left, 1 << 16))):
            left -= len(chunk)
        self.close_connection = True

    def log_message(self, format, *args):  # the supervisor's log has what matters
        pass


def serve(endpoint: Endpoint, port: int) -> ThreadingHTTPServer:
    """The HTTPS server on `port`, at the pool's host only (as --host says), in a thread of its own; returned
    to be shut down."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(endpoint.pool.folder / "cluster.pem", endpoint.pool.folder / "cluster.key")
    server = _Server((endpoint.pool.config["host"], port), _Handler)
    server.endpoint = endpoint
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)  # in
    # the handler's thread: a client that stalls its handshake holds up no one else
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str]) -> None:
    """The endpoint as the supervisor starts it: `python -m playground.pool.server FOLDER SCHEDULER PORT`."""
    from ..child.group import die_with_parent
    from .cluster import Pool

    die_with_parent()  # the supervisor gone (even killed), the endpoint goes too
    server = serve(Endpoint(Pool(Path(argv[0])), argv[1]), int(argv[2]))
    try:
        threading.Event().wait()
    finally:
        server.shutdown()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
