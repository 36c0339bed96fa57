"""The sandbox a worker runs in when a student's code may be hostile: bubblewrap (bwrap, the sandbox Flatpak
is built on), with unprivileged user namespaces.

Inside: no network (a network namespace of its own, loopback only); a PID namespace of its own, so every
process the grade starts ends with it; the system, Python and kplay read-only; the shared build cache
read-only (its precompiled headers and the pool's builds used, never changed); writable only the grade's own
build cache and a /tmp of its own; the kernel's folder read-only; of /dev, the basics and the worker's GPU.
Home folders, the pool's folder and other students' files are not there at all.

Limits, each named in one line when hit (`hit`): processes and memory through a cgroup where the machine lets
this user make one (cgroup v2 delegated, or v1's pids and memory controllers writable), else processes through
RLIMIT_NPROC (not for root, which it does not bind); the size of any one file written, the output log among
them, through RLIMIT_FSIZE; wall time by the supervisor's clock (spawn.py). The worker sets its rlimits on itself
before any kernel code runs (apply_rlimits).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import resource
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ENV = "KPLAY_SANDBOX"  # 1: every worker of this process sandboxed (--sandbox sets it; a pool's workers always)
OWN_CACHE_ENV = "KPLAY_SANDBOX_CACHE"  # the grades' own build cache (default: the cache's sandboxed/)
ROOT_ENV = "KPLAY_SANDBOX_ROOT"  # a pool worker's: each student's own build cache in a folder of theirs under it
KEEP_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_", "CUDA_", "KPLAY_", "TORCH_", "OMP_", "MKL_", "NVIDIA_", "MAX_JOBS",
            "LD_LIBRARY_PATH", "CC", "CXX", "TERM", "COLUMNS", "NO_COLOR", "FORCE_COLOR", "PYTHONUNBUFFERED")
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/sys")
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf", "localtime",
       "host.conf", "gai.conf")  # what the loader, the compilers and Python read; not its keys or shadow
GPU_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


def _setting(name: str, default: float) -> float:
    return float(os.environ.get(f"KPLAY_SANDBOX_{name}") or default)


@dataclass(frozen=True)
class Limits:
    """A grade's limits, each from its environment variable when the grade starts (KPLAY_SANDBOX_PROCESSES ...)."""

    processes: int = field(default_factory=lambda: int(_setting("PROCESSES", 256)))
    memory_mb: int = field(default_factory=lambda: int(_setting("MEMORY_MB", 16384)))
    file_mb: int = field(default_factory=lambda: int(_setting("FILE_MB", 1024)))  # a precompiled header: ~300 MB
    wall_s: float = field(default_factory=lambda: _setting("WALL_S", 900))


def wanted() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


@functools.cache
def unavailable() -> str | None:
    """Why the sandbox cannot start here (one line, with how to fix it), or None."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return "the sandbox needs bubblewrap: install it (Debian and Ubuntu: apt install bubblewrap)"
    done = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
                          capture_output=True, text=True)
    if done.returncode:
        said = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        return (f"the sandbox cannot start ({said}): bubblewrap needs unprivileged user namespaces "
                "(as root: sysctl -w kernel.unprivileged_userns_clone=1 user.max_user_namespaces=15000)")
    return None


@contextlib.contextmanager
def students_cache(student: str):
    """In a pool's worker (ROOT_ENV set): the student's own build cache for the grades inside this block, so no
    student's build can stand in for another's (a build is found by the hash of its sources)."""
    root = os.environ.get(ROOT_ENV)
    before = os.environ.get(OWN_CACHE_ENV)
    if root:
        os.environ[OWN_CACHE_ENV] = str(Path(root) / re.sub(r"[^\w.-]", "_", student))
    try:
        yield
    finally:
        if root and before is None:
            os.environ.pop(OWN_CACHE_ENV, None)
        elif root:
            os.environ[OWN_CACHE_ENV] = before


@dataclass
class Box:
    """One grade's sandbox: the command that starts its worker, its cgroup, and what its limits saw."""

    folder: Path | None  # the kernel's folder, read-only inside (None: a built-in family, in kplay's install)
    own_cache: Path  # the grade's build cache, writable
    shared_cache: Path  # the machine's build cache (precompiled headers, kplay's builds), read-only
    limits: Limits = field(default_factory=Limits)
    gpu: bool = False  # the GPU's device nodes inside
    gpu_minor: int | None = None
    cgroups: list[Path] = field(default_factory=list)

    def environment(self, env: dict) -> dict:
        """What the worker may see of the environment: the toolchain's and kplay's settings, not the rest (a
        pool's secrets, a user's tokens)."""
        return {k: v for k, v in env.items() if k.startswith(KEEP_ENV)}

    def command(self, argv: list[str], writable: list[str] = ()) -> list[str]:
        """argv inside bwrap, which a cgroup-joining shell starts where the machine allows a cgroup; the
        folders in `writable` (the supervisor's channel to the worker) bound writable."""
        binds, bound = [], []
        for path in (*SYSTEM, *_python_paths()):
            if os.path.exists(path) and not any(path == b or path.startswith(b + "/") for b in bound):
                binds += ["--ro-bind", path, path]  # once: under a bound folder it is there (a symlink, unbindable)
                bound.append(path)
        for name in ETC:
            if os.path.exists(f"/etc/{name}"):
                binds += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        shared = self.shared_cache
        if shared.is_dir() and shared != self.own_cache:
            binds += ["--ro-bind", str(shared), str(shared)]
        if self.folder:
            binds += ["--ro-bind", str(self.folder), str(self.folder)]
        for path in (str(self.own_cache), *writable):
            binds += ["--bind", path, path]
        for node in self._gpu_nodes():
            binds += ["--dev-bind", node, node]
        self.cgroups = _cgroups(self.limits)
        box = [shutil.which("bwrap"), "--unshare-all", "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", *binds, "--chdir", str(self.folder or "/tmp"),
               "--setenv", "KPLAY_CACHE", str(self.own_cache), "--setenv", "KPLAY_SHARED_CACHE", str(shared),
               "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--setenv", RLIMITS_ENV, self.rlimits(),
               "--", *argv]
        if not self.cgroups:
            return box
        join = " && ".join(f"echo $$ > {g}/cgroup.procs" for g in self.cgroups)
        return ["/bin/sh", "-c", f'{join} && exec "$@"', "sh", *box]

    def _gpu_nodes(self) -> list[str]:
        """The driver's shared nodes and the worker's GPU's (every GPU's where it has no one GPU); none on a CPU run."""
        if not self.gpu:
            return []
        cards = [f"/dev/nvidia{self.gpu_minor}"] if self.gpu_minor is not None else \
            [str(p) for p in Path("/dev").glob("nvidia[0-9]*")]
        return [n for n in [*(f"/dev/{n}" for n in GPU_NODES), *cards] if os.path.exists(n)]

    def rlimits(self) -> str:
        """What the worker sets on itself before any kernel code runs (apply_rlimits): the file-size limit, and the
        process limit where no cgroup holds it (0: none). Not a preexec_fn: the supervisor may run threads."""
        return f"{self.limits.file_mb << 20},{0 if self.cgroups else self.limits.processes}"

    def hit(self, returncode: int | None, output_bytes: int) -> str | None:
        """The limit the grade ran into, as one line, or None. Python ignores SIGXFSZ: a write past the file-size
        limit fails (EFBIG) instead, so the output log at the limit tells it too."""
        import signal

        if returncode == -signal.SIGXFSZ or output_bytes >= self.limits.file_mb << 20:
            return f"the grade wrote a file over its limit of {self.limits.file_mb} MB (its output or a build's)"
        for g in self.cgroups:
            events = _read(g / "pids.events") or ""
            if any(line.startswith("max ") and line.split()[1] != "0" for line in events.splitlines()):
                return f"the grade hit its limit of {self.limits.processes} processes (a fork bomb?)"
            oom = _read(g / "memory.events") or ""
            failcnt = _read(g / "memory.failcnt")
            if any(line.startswith("oom_kill ") and line.split()[1] != "0" for line in oom.splitlines()) or \
                    failcnt not in (None, "0"):
                return f"the grade ran out of its {self.limits.memory_mb} MB of memory"
        return None

    def close(self) -> None:
        """Every process left in the cgroups killed (the PID namespace ended them already), the cgroups removed."""
        for g in self.cgroups:
            kill = g / "cgroup.kill"
            if kill.exists():
                _write(kill, "1")
            for _ in range(50):
                try:
                    g.rmdir()
                    break
                except OSError:
                    import time

                    time.sleep(0.02)
        self.cgroups = []


RLIMITS_ENV = "KPLAY_SANDBOX_RLIMITS"  # "FILE_BYTES,PROCESSES", set inside the sandbox for the worker


def apply_rlimits() -> None:
    """In the worker, first thing (child/main.py): the limits RLIMITS_ENV names, soft and hard alike. Inside
    the sandbox's user namespace no process can raise a hard limit again."""
    given = os.environ.get(RLIMITS_ENV)
    if not given:
        return
    size, processes = (int(v) for v in given.split(","))
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


def _python_paths() -> list[str]:
    """Python and kplay: the prefixes, and every folder on sys.path (an editable install's source among them)."""
    paths = {p for p in map(os.path.abspath, filter(None, sys.path)) if os.path.isdir(p)}  # the current folder: not
    paths -= {os.getcwd()}  # unless it is kplay's own (below), as in a checkout
    paths |= {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(__file__).resolve().parents[2])}
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    paths |= {cuda} if cuda else set()
    return sorted(p for p in paths if p not in ("/", "/tmp"))  # a venv under /tmp is bound over the sandbox's own


def limits_that_hold() -> set[str]:
    """Which of a grade's limits bind here: "processes" where a cgroup can be made or this user is not root
    (RLIMIT_NPROC), "memory" only through a cgroup; the file size and the wall time always."""
    made = _cgroups(Limits())
    held = {"file", "wall"} | ({"processes"} if os.getuid() != 0 else set())
    for group in made:
        held |= {"processes"} if (group / "pids.max").exists() else set()
        held |= {"memory"} if (group / "memory.max").exists() or (group / "memory.limit_in_bytes").exists() else set()
        group.rmdir()
    return held


def _cgroups(limits: Limits) -> list[Path]:
    """A fresh cgroup for one grade, with its process and memory limits: under this process's own cgroup v2
    where its pids and memory controllers are delegated, else under v1's pids and memory hierarchies where this
    user may write; [] where neither is allowed (the limits then hold as preexec says)."""
    name = f"kplay-{uuid.uuid4().hex[:12]}"
    mine = {}
    for line in (_read(Path("/proc/self/cgroup")) or "").splitlines():
        _, controllers, path = line.split(":", 2)
        mine[controllers] = path
    v2 = Path("/sys/fs/cgroup") / mine.get("", "/").lstrip("/")
    if "" in mine and {"pids", "memory"} <= set((_read(v2 / "cgroup.subtree_control") or "").split()):
        made = _make(v2 / name, {"pids.max": limits.processes, "memory.max": limits.memory_mb << 20,
                                 "memory.swap.max": 0})
        return [made] if made else []
    made = []
    for controller, settings in (("pids", {"pids.max": limits.processes}),
                                 ("memory", {"memory.limit_in_bytes": limits.memory_mb << 20})):
        key = next((k for k in mine if controller in k.split(",")), None)
        root = next((Path("/sys/fs/cgroup") / d for d in (controller, key or "") if d and
                     (Path("/sys/fs/cgroup") / d).is_dir()), None)
        group = _make(root / mine[key].lstrip("/") / name, settings) if key and root else None
        made += [group] if group else []
    return made


def _make(group: Path, settings: dict) -> Path | None:
    try:
        group.mkdir()
    except OSError:
        return None
    for file, value in settings.items():
        if (group / file).exists() and not _write(group / file, str(value)) and file != "memory.swap.max":
            group.rmdir()
            return None
    return group


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _write(path: Path, text: str) -> bool:
    try:
        path.write_text(text)
        return True
    except OSError:
        return False


def gpu_minor() -> int | None:
    """The device minor of the GPU this worker may use (CUDA_VISIBLE_DEVICES: one index or UUID), from the
    driver's /proc files; None with no GPU, or where more than one is visible (then all go in)."""
    driver = Path("/proc/driver/nvidia/gpus")
    if not driver.is_dir():
        return None
    cards = []
    for info in sorted(driver.glob("*/information")):
        fields = dict(line.split(":", 1) for line in info.read_text().splitlines() if ":" in line)
        cards.append((fields.get("GPU UUID", "").strip(), int(fields.get("Device Minor", "-1").strip())))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or "," in visible or not visible.strip():
        return cards[0][1] if len(cards) == 1 else None
    v = visible.strip()
    return next((minor for i, (u, minor) in enumerate(cards) if v == str(i) or (len(v) > 3 and u.startswith(v))), None)
