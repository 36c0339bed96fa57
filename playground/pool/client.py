"""The student's side of the pool: `kplay check DIR --pool TOKEN-FILE` sends the folder's kernel sources (and
nothing else) to the pool's endpoint over HTTPS, trusting only the class's CA, and gets the record back."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

from ..core.errors import KplayError, UsageError

REPLY_S = 3600  # how long a grade may take, queue included
MAX_BYTES = 1 << 20  # a submission's whole body (the endpoint refuses more, 413)
MAX_FILE = 256 << 10  # one source file


def size_text(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB" if n >= 1 << 20 else f"{-(-n >> 10)} KB"


def token(path: Path) -> dict:
    """The token file an instructor gave: the endpoint, the student, the token and the CA to trust."""
    try:
        data = json.loads(Path(path).read_text())
        if not all(isinstance(data.get(k), str) for k in ("endpoint", "student", "token", "ca")):
            raise ValueError("a field is missing")
    except (OSError, ValueError) as e:
        raise UsageError(f"--pool {path}: not a token file from kplay pool add-student ({e})") from None
    return data


def sources(folder: Path) -> tuple[str, str, dict]:
    """(family, variant, {name: text}) of a started folder: only the files of its variant the student edits."""
    from ..family import registry
    from ..workshop import folder as started

    ex = started.table(folder)
    v = registry.load_family(folder).variant(ex["variant"])
    files = {}
    for name in [*v.sources, *v.includes]:
        try:
            files[name] = (folder / name).read_text()
        except OSError as e:
            raise UsageError(f"{folder / name}: {e.strerror}") from None
    return ex["family"], v.name, files


SUFFIXES = (".toml", ".py", ".cpp", ".cu", ".h", ".cuh", ".hpp")  # what `run --pool` sends of a kernel folder


def check(folder: Path, token_file: Path, timeout: float, sanitize: bool, seed: int | None = None) -> dict:
    """The record the pool graded (its worker named in "worker"); the pool's refusal as a one-line error."""
    family, variant, files = sources(folder)
    return _post(token(token_file), "/check", {"family": family, "variant": variant, "files": files,
                                               "timeout": timeout, "sanitize": sanitize, "seed": seed})["record"]


def run(req, token_file: Path) -> dict:
    """`kplay run ... --pool`: the run's record from a worker of the pool; a kplay error there is raised here.
    A built-in family is the pool's own; a folder's kernel files (task.toml, spec.py, sources) are sent."""
    from ..core.errors import BuildError, KernelCrash
    from ..family import registry

    folder = Path(req.path)
    builtin = folder.parent.resolve() == registry.BUILTIN.resolve()
    files = {} if builtin else {str(f.relative_to(folder)): f.read_text() for f in sorted(folder.rglob("*"))
                                if f.is_file() and f.suffix in SUFFIXES and "__pycache__" not in f.parts
                                and not any(p.startswith(".") for p in f.relative_to(folder).parts)}
    reply = _post(token(token_file), "/run", {"request": json.loads(req.to_json()), "files": files})
    if "error" in reply:
        err = reply["error"]
        error = {"BuildError": BuildError, "KernelCrash": KernelCrash}.get(err["kind"], UsageError)(err["message"])
        error.details = err.get("details", [])
        raise error
    return reply["result"] | {"worker": reply["worker"]}


def _post(pass_: dict, path: str, body: dict) -> dict:
    """POST the token and body to the endpoint over HTTPS, trusting the class's CA alone."""
    for name, text in body.get("files", {}).items():  # checked here: a refusal mid-upload is a reset, not a line
        if len(text.encode()) > MAX_FILE:
            raise UsageError(f"{name}: a file is at most {MAX_FILE >> 10} KB (this one: {size_text(len(text.encode()))})")
    data = json.dumps({"token": pass_["token"], **body}).encode()
    if len(data) > MAX_BYTES:
        raise UsageError(f"a submission is at most {MAX_BYTES >> 20} MB (this one: {size_text(len(data))})")
    context = ssl.create_default_context(cadata=pass_["ca"])  # the class's CA, and no other
    context.check_hostname = False  # the server may be reached by any name; its certificate must still be the CA's
    request = urllib.request.Request(f"{pass_['endpoint']}{path}", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=REPLY_S) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as e:
        raise _refusal(e) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise UsageError(f"the pool at {pass_['endpoint']} cannot be reached: {reason}") from None


def _refusal(e) -> KplayError:
    try:
        message = json.loads(e.read())["error"]
    except (ValueError, KeyError, TypeError):
        message = f"HTTP {e.code}"
    return UsageError(f"the pool refused: {message}")
