"""A class's grading pool on Dask distributed (the `pool` extra): its folder, certificates, supervised processes.

The pool folder (on the instructor's server) holds the class's CA and the one certificate its own machines
share (Dask has no roles: whoever holds it may run anything on the cluster, so no student ever does), the
students' token digests, and the results. `kplay pool start` runs a supervisor: the scheduler, one worker per
visible GPU (pinned with CUDA_VISIBLE_DEVICES, one grade at a time, resource GPU=1) or CPU workers on a box
with none, and the student endpoint (endpoint.py). A Dask worker that loses its scheduler exits and is not
restarted by its nanny, so the supervisor restarts any process of its own that ends, against fixed addresses.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..child import sandbox
from ..core.errors import UsageError

NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,63}")  # a student's name: a file name under results/, never a path
RESTART_S = 1.0  # a supervised process that ended is started again after this


def needs_dask():
    """distributed, or a one-line error that says how to get it."""
    try:
        import distributed
    except ImportError:
        raise UsageError(f"the pool needs Dask: {sys.executable} -m pip install distributed cryptography watchfiles"
                         ) from None
    return distributed


@dataclass
class Pool:
    """A pool's folder and what it says: where the scheduler and the endpoint listen."""

    folder: Path

    @property
    def config(self) -> dict:
        try:
            return json.loads((self.folder / "pool.json").read_text())
        except (OSError, ValueError):
            raise UsageError(f"{self.folder} is not a pool folder (kplay pool start --dir {shlex.quote(str(self.folder))} makes one)") from None

    @property
    def results(self) -> Path:
        return self.folder / "results"

    def security(self):
        """The cluster's TLS: every endpoint shows the class's certificate, signed by its CA, and none talks in the clear."""
        from distributed import Security

        ca, pem, key = (str(self.folder / n) for n in ("ca.pem", "cluster.pem", "cluster.key"))
        return Security(require_encryption=True, tls_ca_file=ca, tls_client_cert=pem, tls_client_key=key,
                        tls_scheduler_cert=pem, tls_scheduler_key=key, tls_worker_cert=pem, tls_worker_key=key)

    def tokens(self) -> dict[str, str]:
        """{sha256 of a token: student name}."""
        try:
            return json.loads((self.folder / "tokens.json").read_text())
        except (OSError, ValueError):
            return {}


def create(folder: Path, host: str, port: int, endpoint_port: int) -> Pool:
    """A new pool folder (kept as it is when it has one already: tokens stay valid across restarts)."""
    pool = Pool(folder)
    (folder / "ca.key").unlink(missing_ok=True)  # kept by a pool made before: no grade needs it, nor any server
    if (folder / "pool.json").exists():
        config = pool.config
        if (config["host"], config["port"], config["endpoint_port"]) != (host, port, endpoint_port):
            config.update(host=host, port=port, endpoint_port=endpoint_port)
            write_whole(folder / "pool.json", json.dumps(config, indent=2))
        return pool
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)  # the cluster's key and the tokens' digests: the instructor's alone
    _certificates(folder, host)
    (folder / "results").mkdir(exist_ok=True)
    write_whole(folder / "pool.json", json.dumps({"id": secrets.token_hex(8), "host": host, "port": port,
                                             "endpoint_port": endpoint_port}, indent=2))
    return pool


def _certificates(folder: Path, host: str) -> None:
    """The class's CA, and the certificate it signs for the pool's own machines (and the endpoint's HTTPS)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    name = lambda cn: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # noqa: E731
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("kplay class CA")).issuer_name(name("kplay class CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=365))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(ca_key, hashes.SHA256()))
    alt = x509.SubjectAlternativeName([x509.DNSName(host), x509.DNSName("localhost"), x509.DNSName("kplay-pool")])
    cert = (x509.CertificateBuilder().subject_name(name("kplay-pool")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(alt, critical=False).sign(ca_key, hashes.SHA256()))
    pem = lambda c: c.public_bytes(serialization.Encoding.PEM).decode()  # noqa: E731
    secret = lambda k: k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,  # noqa: E731
                                       serialization.NoEncryption()).decode()
    write_whole(folder / "ca.pem", pem(ca), 0o644)  # the CA's key is dropped here: it signs this one certificate,
    # and no server of the pool can then sign another (a server taken over does not hand out the class's CA)
    write_whole(folder / "cluster.pem", pem(cert))
    write_whole(folder / "cluster.key", secret(key))


def add_student(pool: Pool, name: str, out: Path) -> Path:
    """A token for `name`, in a file the student keeps (the endpoint's address, the CA to trust, the token);
    the pool keeps only its digest. A name given again gets a new token and the old one stops working."""
    import hashlib

    if not NAME.fullmatch(name):
        raise UsageError(f"student name {name!r}: letters, digits, '.', '_' and '-', starting with a letter or digit")
    config, token = pool.config, secrets.token_urlsafe(24)
    tokens = {digest: who for digest, who in pool.tokens().items() if who != name}
    tokens[hashlib.sha256(token.encode()).hexdigest()] = name
    write_whole(pool.folder / "tokens.json", json.dumps(tokens, indent=2))
    path = out / f"{name}.kplay-token"
    write_whole(path, json.dumps({"endpoint": f"https://{config['host']}:{config['endpoint_port']}", "student": name,
                             "pool": config["id"], "token": token, "ca": (pool.folder / "ca.pem").read_text()},
                            indent=2))
    return path


def join_file(pool: Pool, out: Path) -> Path:
    """What another server of the instructor's needs to add its GPUs: the scheduler's address and the cluster's
    certificate and key (a secret: it runs anything on the cluster)."""
    config = pool.config
    bundle = {"scheduler": f"tls://{config['host']}:{config['port']}", "pool": config["id"],
              **{n: (pool.folder / n).read_text() for n in ("ca.pem", "cluster.pem", "cluster.key")}}
    write_whole(out, json.dumps(bundle, indent=2))
    return out


def from_join_file(path: Path, folder: Path) -> tuple[Pool, str]:
    """A joining server's own pool folder, from the instructor's join file: (pool, scheduler address)."""
    try:
        bundle = json.loads(path.read_text())
        scheduler = bundle["scheduler"]
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        for n in ("ca.pem", "cluster.pem", "cluster.key"):
            write_whole(folder / n, bundle[n])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path}: not a join file written by kplay pool start ({e})") from None
    return Pool(folder), scheduler


# ---- the processes: the scheduler, the workers, and their supervisor ------------------------------------

def gpus() -> list[str]:
    """The names of this machine's visible GPUs, through nvidia-smi (no CUDA context in the supervisor)."""
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [line.strip() for line in listed.stdout.splitlines() if line.strip()] if listed.returncode == 0 else []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        names = [names[int(i)] for i in visible.split(",") if i.strip().isdigit() and int(i) < len(names)]
    return names


def worker_commands(pool: Pool, scheduler: str, cpu_workers: int, host: str | None = None) -> dict[str, tuple]:
    """{name: (argv, environment)}: one worker per visible GPU, pinned to it; else `cpu_workers` CPU workers.
    A worker's name (the host's, unless given) is what a student's report names: two hosts must differ."""
    if why := sandbox.unavailable():
        raise UsageError(f"{why}. A pool's workers grade only in the sandbox: no worker started")
    host, names = host or socket.gethostname(), gpus()
    base = [sys.executable, "-m", "playground.pool.cluster", "worker", str(pool.folder), scheduler]
    boxed = {sandbox.ENV: "1", sandbox.ROOT_ENV: str(pool.folder / "grade-builds")}
    if names:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        index = visible.split(",") if visible else [str(i) for i in range(len(names))]
        return {f"{host} GPU {i} ({gpu})": ([*base, f"{host} GPU {i} ({gpu})", "GPU=1,GRADE=1"],
                                            {"CUDA_VISIBLE_DEVICES": index[i], **boxed})
                for i, gpu in enumerate(names)}
    return {f"{host} CPU {i}": ([*base, f"{host} CPU {i}", "GRADE=1"], {"CUDA_VISIBLE_DEVICES": "", **boxed})
            for i in range(cpu_workers)}


class Supervisor:
    """Starts its processes and starts again any that ends, until stopped."""

    def __init__(self, commands: dict[str, tuple[list[str], dict]], log: Path):
        self.commands, self.log, self.procs, self.restarts = commands, log, {}, {}

    def start(self, name: str) -> None:
        argv, env = self.commands[name]
        with open(self.log / (re.sub(r"[^\w.-]", "_", name) + ".log"), "a") as log:
            self.procs[name] = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=log,
                                                start_new_session=True)

    def step(self, say) -> None:
        """Start what is not running (once RESTART_S has passed since it ended)."""
        for name in self.commands:
            proc = self.procs.get(name)
            if proc is None:
                self.start(name)
            elif proc.poll() is not None:
                self.restarts[name] = self.restarts.get(name, 0) + 1
                say(f"{name} ended (exit {proc.returncode}); starting it again")
                time.sleep(RESTART_S)
                self.start(name)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def serve(pool: Pool, cpu_workers: int, say) -> None:
    """`kplay pool start`: the scheduler, the workers and the endpoint, each started again if it ends; until Ctrl-C."""
    config = pool.config
    scheduler = f"tls://{config['host']}:{config['port']}"
    _free(config["host"], config["endpoint_port"])  # taken: one line now, not an endpoint started again and again
    commands = {"scheduler": ([sys.executable, "-m", "playground.pool.cluster", "scheduler", str(pool.folder),
                               str(config["port"])], {}),
                "endpoint": ([sys.executable, "-m", "playground.pool.server", str(pool.folder), scheduler,
                              str(config["endpoint_port"])], {}),
                **worker_commands(pool, scheduler, cpu_workers)}
    say(f"scheduler {scheduler}; students: https://{config['host']}:{config['endpoint_port']}; "
        f"workers: {', '.join(n for n in commands if n not in ('scheduler', 'endpoint'))}")
    _supervise(pool, commands, say)


def _free(host: str, port: int) -> None:
    """The endpoint's port can be listened on at `host`."""
    with socket.socket() as s:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
        except OSError as e:
            raise UsageError(f"the endpoint's port {port} cannot be used here: {e.strerror}") from None


def join(pool: Pool, scheduler: str, cpu_workers: int, host: str | None, say) -> None:
    """`kplay pool join`: this server's workers for the instructor's scheduler, supervised; until Ctrl-C."""
    commands = worker_commands(pool, scheduler, cpu_workers, host)
    say(f"joined {scheduler} with {', '.join(commands)}")
    _supervise(pool, commands, say)


def _supervise(pool: Pool, commands: dict, say) -> None:
    """Keep the processes running until Ctrl-C or SIGTERM; then stop them all (their logs in the pool's logs/)."""
    import signal

    (pool.folder / "logs").mkdir(exist_ok=True)
    supervisor = Supervisor(commands, pool.folder / "logs")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a plain kill stops the children too
    try:
        while True:
            supervisor.step(say)
            time.sleep(0.5)
    finally:
        supervisor.stop()


def status(pool: Pool) -> dict:
    """The workers (name, pid, GPU or CPU, what each grades now) and the grades that wait."""
    from distributed import Client

    config = pool.config
    with Client(f"tls://{config['host']}:{config['port']}", security=pool.security(), timeout=10,
                set_as_default=False) as client:
        info, processing = client.scheduler_info(n_workers=-1), client.processing()
        waiting, pids = client.run_on_scheduler(_waiting), client.run(os.getpid)
    workers = [{"name": str(w["name"]), "pid": pids.get(address), "address": address,
                "gpu": bool(w.get("resources", {}).get("GPU")), "grading": [str(k) for k in processing.get(address, [])]}
               for address, w in info["workers"].items()]
    return {"scheduler": f"tls://{config['host']}:{config['port']}", "workers": sorted(workers, key=lambda w: w["name"]), "waiting": waiting}


def _waiting(dask_scheduler) -> list[str]:
    """On the scheduler: the grades not yet on a worker."""
    return sorted(str(k) for k, ts in dask_scheduler.tasks.items() if ts.state in ("queued", "no-worker", "waiting"))


def main(argv: list[str]) -> None:
    """The supervised processes: `scheduler FOLDER PORT` and `worker FOLDER ADDRESS NAME RESOURCES`."""
    import asyncio

    from ..child.group import die_with_parent

    die_with_parent()  # the supervisor gone (even killed), its processes go too
    needs_dask()
    pool = Pool(Path(argv[1]))
    if argv[0] == "scheduler":
        asyncio.run(_scheduler(pool, int(argv[2])))
    else:
        resources = {k: float(v) for k, v in (r.split("=") for r in argv[4].split(","))}
        asyncio.run(_worker(pool, argv[2], argv[3], resources))


async def _scheduler(pool: Pool, port: int) -> None:
    from distributed import Scheduler

    async with Scheduler(host=pool.config["host"], port=port, protocol="tls", security=pool.security(),
                         dashboard=False) as scheduler:
        await scheduler.finished()


async def _worker(pool: Pool, address: str, name: str, resources: dict) -> None:
    """One grade at a time; it gives up after 60 s without its scheduler, and the supervisor starts it again."""
    from distributed import Worker

    async with Worker(address, nthreads=1, name=name, resources=resources, security=pool.security(),
                      death_timeout=60, dashboard=False) as worker:
        await worker.finished()


if __name__ == "__main__":
    main(sys.argv[1:])


def write_whole(path: Path, text: str, mode: int = 0o600) -> None:
    """Write whole or not at all (a reader never sees half a file); two writers at once each write their own."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
