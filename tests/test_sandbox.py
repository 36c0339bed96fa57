"""The sandbox (child/sandbox.py): what a hostile kernel reaches inside it, and what it leaves behind.

One probe kernel, built once: on its first call it tries the network (a listener of the test's on loopback),
a file outside its folder, a write to the shared build cache, and forks a daemon (setsid, sleep), then raises
with what each attempt gave (errno, 0 for success).
"""

import os
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import importlib

import pytest

from conftest import wrong_folder
from playground.child import sandbox

lock = importlib.import_module("playground.run.lock")  # playground.run is also a function
pytestmark = pytest.mark.skipif(bool(sandbox.unavailable()) and not os.environ.get("KPLAY_NEED_SANDBOX"),
                                reason=str(sandbox.unavailable()))

ANCHOR = "  const int64_t n = c.numel();  // every element whatever the shape (not size(0)): a 2-D x sums to one value"
PROBE = """
  if (std::string(std::getenv("KPLAY_PROBE_MODE")) == "fork") {  // more processes than the grade may have
    int made = 0;
    for (int i = 0; i < 64; ++i) {
      const pid_t p = fork();
      if (p == 0) { execlp("sleep", "sleep", std::getenv("KPLAY_PROBE_MARK"), static_cast<char*>(nullptr)); _exit(0); }
      made += p > 0;
    }
    STD_TORCH_CHECK(false, "probe: forked " + std::to_string(made) + " .");
  }
  if (std::string(std::getenv("KPLAY_PROBE_MODE")) == "sleep") sleep(60);  // longer than the grade may take
  if (std::string(std::getenv("KPLAY_PROBE_MODE")) == "memory") {  // more memory than the grade may have
    volatile char* block = static_cast<char*>(std::malloc(size_t(3) << 30));
    for (size_t i = 0; block && i < (size_t(3) << 30); i += 4096) block[i] = 1;
  }
  if (std::string(std::getenv("KPLAY_PROBE_MODE")) == "write") {  // more output than the grade may write
    std::string line(1 << 20, 'x');
    for (int i = 0; i < 4; ++i) std::fwrite(line.data(), 1, line.size(), stderr);
  }
  {  // the probe: what can this kernel reach?
    std::string seen;
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(std::atoi(std::getenv("KPLAY_PROBE_PORT")));
    a.sin_addr.s_addr = htonl(0x7f000001);
    seen += "net=" + std::to_string(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno);
    seen += " read=" + std::to_string(std::fopen(std::getenv("KPLAY_PROBE_SECRET"), "r") ? 0 : errno);
    seen += " write=" + std::to_string(std::fopen(std::getenv("KPLAY_PROBE_CACHE"), "w") ? 0 : errno);
    if (fork() == 0) {
      setsid();
      execlp("sleep", "sleep", std::getenv("KPLAY_PROBE_MARK"), static_cast<char*>(nullptr));
      _exit(0);
    }
    usleep(300000);  // the daemon's setsid and exec first, as a kernel that means it would wait: kplay kills the
                     // worker's session as the worker ends, and a daemon still in it would go with it
    STD_TORCH_CHECK(false, "probe: " + seen + " .");
  }
"""
INCLUDES = "#include <arpa/inet.h>\n#include <netinet/in.h>\n#include <sys/socket.h>\n#include <unistd.h>\n" \
           "#include <cerrno>\n#include <cstdio>\n#include <cstdlib>\n#include <string>\n"


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe") / "sum"
    return wrong_folder(folder, "sum", {"patch": ["#include <vector>\n", INCLUDES + "#include <vector>\n",
                                                  ANCHOR, ANCHOR + PROBE]})


@pytest.fixture
def listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def _daemons(mark: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"^sleep {mark}$"], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def _probe_env(monkeypatch, tmp_path, port: int, sandboxed: bool) -> str:
    from playground.compiler.toolchain import cache_dir

    mark = str(7000 + os.getpid() % 1000 + sandboxed)
    secret = tmp_path / "secret"
    secret.write_text("the pool's keys")
    monkeypatch.setenv("KPLAY_PROBE_PORT", str(port))
    monkeypatch.setenv("KPLAY_PROBE_SECRET", str(secret))
    monkeypatch.setenv("KPLAY_PROBE_CACHE", str(cache_dir() / "poisoned-by-a-grade"))
    monkeypatch.setenv("KPLAY_PROBE_MARK", mark)
    monkeypatch.setenv(sandbox.ENV, "1" if sandboxed else "0")
    monkeypatch.setenv("KPLAY_PROBE_MODE", "reach")
    return mark


def test_outside_the_sandbox_the_probe_reaches_everything_but_the_lease(kplay, probe, listener, monkeypatch, tmp_path):
    """The control: the same kernel, unsandboxed, connects, reads, writes and leaves its daemon; the daemon holds
    no lease (kplay holds them for its worker), so the next timing does not wait on it."""
    mark = _probe_env(monkeypatch, tmp_path, listener, sandboxed=False)
    monkeypatch.setattr(lock, "WAIT_S", 5.0)
    try:
        result = kplay("run", probe, "--no-bench", "--n", "1000")
        assert result.exit_code == 4 and "probe: net=0 read=0 write=0 ." in " ".join(result.output.split()), result.output
        assert _daemons(mark)
        timed = kplay("run", "sum", "--n", "1000", "--variant", "cpp")
        assert timed.exit_code == 0, timed.output
    finally:
        for pid in _daemons(mark):
            os.kill(pid, 9)
        from playground.compiler.toolchain import cache_dir

        (cache_dir() / "poisoned-by-a-grade").unlink(missing_ok=True)


def test_in_the_sandbox_nothing_is_reached_and_nothing_is_left(probe, listener, monkeypatch, tmp_path):
    """Five grades at once: no network (refused), no file outside (not there), the shared cache read-only,
    and none of their five daemons left once they end."""
    from playground.child import spawn
    from playground.core.errors import KernelCrash
    from playground.family.request import Request

    mark = _probe_env(monkeypatch, tmp_path, listener, sandboxed=True)
    request = Request(family="sum", path=str(probe), sizes={"n": 1000}, bench=False)

    def grade(_):
        with pytest.raises(KernelCrash) as e:
            spawn.run(request)
        return str(e.value)

    with ThreadPoolExecutor(5) as pool:
        said = list(pool.map(grade, range(5)))
    refused, missing, read_only = 111, 2, 30  # ECONNREFUSED, ENOENT, EROFS
    assert all(f"probe: net={refused} read={missing} write={read_only} ." in s for s in said), said
    time.sleep(0.2)
    assert not _daemons(mark)


@pytest.mark.parametrize("mode, limit, says", [
    ("fork", ("PROCESSES", "16"), "the grade hit its limit of 16 processes"),
    ("memory", ("MEMORY_MB", "1536"), "the grade ran out of its 1536 MB of memory"),
    ("write", ("FILE_MB", "1"), "the grade wrote a file over its limit of 1 MB"),
    ("sleep", ("WALL_S", "5"), "the run took over 5 s, the sandbox's limit (KPLAY_SANDBOX_WALL_S), and was stopped")])
def test_a_limit_hit_is_one_line(probe, listener, monkeypatch, tmp_path, mode, limit, says):
    """Processes and memory (a cgroup's, where one can be made; else processes through RLIMIT_NPROC), the size
    of a file (the output log's too) and the wall time: each named when hit; no forked process outlives the grade."""
    from playground.child import spawn
    from playground.core.errors import KernelCrash
    from playground.family.request import Request

    mark = _probe_env(monkeypatch, tmp_path, listener, sandboxed=True)
    monkeypatch.setenv("KPLAY_PROBE_MODE", mode)
    monkeypatch.setenv(f"KPLAY_SANDBOX_{limit[0]}", limit[1])
    held = {"fork": "processes", "memory": "memory", "write": "file", "sleep": "wall"}[mode]
    if held not in sandbox.limits_that_hold():
        pytest.skip(f"no cgroup this process may make: its {held} limit does not hold here")
    with pytest.raises(KernelCrash) as e:
        spawn.run(Request(family="sum", path=str(probe), sizes={"n": 1000}, bench=False, timeout=100))
    assert says in str(e.value), str(e.value)
    time.sleep(0.2)
    assert not _daemons(mark)


def test_the_sandbox_flag_runs_a_kernel(kplay, monkeypatch):
    """--sandbox: a built-in kernel passes inside as outside."""
    monkeypatch.setenv(sandbox.ENV, "0")  # restored after: --sandbox sets it for the process
    result = kplay("run", "sum", "--n", "1e5", "--no-bench", "--sandbox")
    assert result.exit_code == 0, result.output


def test_a_wrapping_tool_writes_its_log_from_inside(monkeypatch, tmp_path):
    """compute-sanitizer and ncu run inside the sandbox, around the worker: the log each is told to write lands
    where the supervisor reads it (the sandbox's /tmp is its own). A stand-in writes a real report."""
    from test_sanitize import fake_sanitizer

    from playground.compiler.toolchain import cache_dir
    from playground.family import request
    from playground.insight import sanitize

    tools = cache_dir() / "test-tools" / str(os.getpid())  # inside, the shared cache is there (read-only); tmp is not
    tools.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(sanitize, "executable", lambda: fake_sanitizer(tools, "fast-memcheck"))
    monkeypatch.setenv(sandbox.ENV, "1")
    try:
        r = sanitize.run(request.make("sum", device="cpu", sizes={"n": 1000}, bench=False, lineinfo=True), "memcheck")
    finally:
        shutil.rmtree(tools)
    assert (r["ok"], r["sanitize"]["findings"], r["sanitize"]["summary"]) == (True, [], "0 errors"), r["sanitize"]


def test_a_lease_wait_is_bounded_and_names_the_holder(kplay, monkeypatch, tmp_path):
    """A process holding the CPU's lease (a daemon of a kernel, before): the run waits KPLAY_LEASE_WAIT_S,
    then one line that names it."""
    monkeypatch.setenv("KPLAY_LEASES", str(tmp_path))
    monkeypatch.setattr(lock, "WAIT_S", 1.0)
    holder = subprocess.Popen(["python3", "-c", "import fcntl, os, sys, time; f = os.open(sys.argv[1], os.O_RDWR | "
                               "os.O_CREAT); fcntl.flock(f, fcntl.LOCK_EX); print(1, flush=True); time.sleep(60)",
                               str(tmp_path / "cpu.lease")], stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()
        result = kplay("run", "sum", "--n", "1000")
        said = " ".join(result.output.split())
        assert result.exit_code == 2 and "waited 1 s for the cpu lease, held by pid" in said, result.output
        assert f"pid {holder.pid} (" in said and "python3 -c import fcntl" in said, result.output
    finally:
        holder.kill()
