"""The pool's student endpoint: HTTPS, one token per student; it grades a submission on the cluster for them.

Students never hold a Dask certificate. They send a started folder's kernel sources and their token; the
endpoint checks both, submits the grade to a free worker (`grade_files`, run there), writes the record to the
results folder under the token's name, then answers. The exercise's own task.toml and spec.py are the
worker's (kplay's), never the student's: only the files the student edits are taken from the submission.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import ssl
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .errors import UsageError
from .pool import Pool, _write

MAX_BYTES = 1 << 20  # a submission's whole body
MAX_FILE = 256 << 10  # one source file


class Refused(Exception):
    """A request the endpoint answers with an HTTP error: (status, one line)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def editable(family: str, variant: str) -> tuple:
    """(family, variant, the file names a student may send) of a built-in exercise; Refused otherwise."""
    from . import exercise, registry
    from .errors import KplayError

    try:
        fam = registry.find(family)
        v = fam.variant(variant)
    except KplayError as e:
        raise Refused(400, f"not an exercise of this pool: {e}") from None
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
        raise Refused(400, f"{fam.name}/{v.name} takes only {', '.join(sorted(allowed))}; not {', '.join(unknown)}")
    big = [n for n, t in body["files"].items() if len(t.encode()) > MAX_FILE]
    if big:
        raise Refused(413, f"{big[0]} is over {MAX_FILE >> 10} KB")
    return fam, v, body["files"]


def grade_files(family: str, variant: str, files: dict, student: str, timeout: float, sanitize: bool) -> dict:
    """On a worker: the exercise started afresh in a temporary folder, the student's files written over its
    starter, graded as `kplay check` grades (each kernel in kplay's child process); the worker named."""
    import tempfile

    from . import exercise, registry
    from .errors import KplayError
    from .scaffold import eject

    fam = registry.find(family)
    v = fam.variant(variant)
    with tempfile.TemporaryDirectory(prefix="kplay-grade-") as tmp:
        folder = Path(tmp) / "exercise"
        eject(fam, folder, [v], {}, starter=True, exercise={"family": family, "variant": variant, "student": student,
                                                             "hints": []})
        for name, text in files.items():
            (folder / name).write_text(text)
        try:
            rec = exercise.grade(folder, "cuda" if v.device == "cuda" else "cpu", student, lambda *a, **k: None,
                                 timeout, sanitize)
        except KplayError as e:
            rec = exercise.unusable(folder, student, e)
    return rec | {"worker": _worker_name()}


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return "this machine"


class Endpoint:
    """Tokens checked, grades submitted to the cluster, records kept: the logic behind the HTTPS server."""

    def __init__(self, pool: Pool, scheduler: str):
        self.pool, self.scheduler, self._client, self._lock = pool, scheduler, None, threading.Lock()

    def student(self, token) -> str:
        """The token's student; Refused (401) for no token, or one this pool did not issue."""
        if not isinstance(token, str) or not token:
            raise Refused(401, "no token: kplay check DIR --pool TOKEN-FILE (the file your instructor gave you)")
        digest = hashlib.sha256(token.encode()).hexdigest()
        for known, name in self.pool.tokens().items():
            if hmac.compare_digest(known, digest):
                return name
        raise Refused(401, "this token is not one of this pool's (ask your instructor for yours)")

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
        resources = {"GPU": 1} if v.device == "cuda" else {"GRADE": 1}
        try:
            client = self.client()
            if v.device == "cuda" and not any(w.get("resources", {}).get("GPU") for w in
                                              client.scheduler_info()["workers"].values()):
                raise Refused(503, f"{fam.name}/{v.name} needs a GPU and this pool has no GPU worker now")
            future = client.submit(grade_files, fam.name, v.name, files, student, timeout,
                                   bool(body.get("sanitize", True)), key=f"grade {student} {fam.name}/{v.name} "
                                   f"{uuid.uuid4().hex[:6]}", resources=resources, pure=False)
            rec = future.result()
        except Refused:
            raise
        except Exception as e:  # the scheduler restarted, or the grade killed its workers: never a silent wait
            raise Refused(503, f"the pool lost this grade ({type(e).__name__}): send it again") from None
        self.save(student, fam.name, v.name, rec)
        return rec

    def save(self, student: str, family: str, variant: str, rec: dict) -> Path:
        """The latest record per student per exercise; every name in the path is the pool's, never the student's."""
        folder = (self.pool.results / student).resolve()
        if self.pool.results.resolve() not in folder.parents:
            raise Refused(500, "a student name outside the results folder")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{family}-{variant}.json"
        _write(path, json.dumps(rec, indent=2), 0o644)
        return path


def serve(endpoint: Endpoint, port: int) -> ThreadingHTTPServer:
    """The HTTPS server on `port`, in a thread of its own; returned to be shut down."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(endpoint.pool.folder / "cluster.pem", endpoint.pool.folder / "cluster.key")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            try:
                if self.path != "/check":
                    raise Refused(404, f"no such request: {self.path}")
                size = int(self.headers.get("Content-Length") or 0)
                if size > MAX_BYTES:
                    raise Refused(413, f"a submission is at most {MAX_BYTES >> 20} MB")
                body = json.loads(self.rfile.read(size) or b"{}")
                status, reply = 200, {"record": endpoint.grade(body if isinstance(body, dict) else {})}
            except Refused as e:
                status, reply = e.status, {"error": str(e)}
            except (ValueError, UsageError) as e:
                status, reply = 400, {"error": str(e)}
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format, *args):  # the supervisor's log has what matters
            pass

    server = ThreadingHTTPServer(("", port), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)  # in
    # the handler's thread: a client that stalls its handshake holds up no one else
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
