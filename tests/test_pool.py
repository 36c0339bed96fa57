"""The grading pool, for real: `kplay pool start` (a Dask scheduler and two CPU workers, separate processes, TLS
with the class's CA) and its students' endpoint, which grades started folders submitted at once."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from pathlib import Path

import pytest

from conftest import ROOT

pytest.importorskip("distributed", reason='the pool needs kplay[pool]')
from playground.child import sandbox  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(sandbox.unavailable()) and not os.environ.get("KPLAY_NEED_SANDBOX"),
                                                   reason=f"a pool's workers grade in the sandbox: {sandbox.unavailable()}")]

from playground.pool import server as endpoint, cluster as pool, client as remote  # noqa: E402

from playground.workshop import exercise

from playground.family import registry
from playground.core.errors import UsageError  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(what, seconds: float = 90.0, every: float = 0.2):
    """what()'s first truthy value within `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            found = what()
        except Exception:
            found = None
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {seconds} s: {what}")


def kplay(*args, **run):
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}, **run)


@pytest.fixture(scope="module")
def class_pool(tmp_path_factory):
    """A running pool with two CPU workers; its folder, and the supervisor's process."""
    folder = tmp_path_factory.mktemp("pool") / "pool"
    supervisor = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "pool", "start", "--dir", folder, "--host",
                                   "127.0.0.1", "--port", str(free_port()), "--endpoint-port", str(free_port()),
                                   "--cpu-workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        until(lambda: len(pool.status(pool.Pool(folder))["workers"]) == 2)
        yield pool.Pool(folder), supervisor
    finally:
        supervisor.terminate()
        supervisor.wait(30)
    assert not subprocess.run(["pgrep", "-f", f"playground.pool.cluster .* {folder}"], capture_output=True).stdout


@pytest.fixture(scope="module")
def students(class_pool, tmp_path_factory):
    """Six started sum/cpp folders, each with its token: three solved, three left as started."""
    p, _ = class_pool
    root = tmp_path_factory.mktemp("class")
    solved = registry.find("sum")
    made = {}
    for k, name in enumerate(["ada", "bob", "cy", "dee", "eve", "fay"]):
        folder = root / name
        exercise.start(solved, solved.variants["cpp"], folder, {}, name=name)
        if k % 2 == 0:
            shutil.copy(ROOT / "snippets" / "sum" / "sum.cpp", folder / "sum.cpp")
        made[name] = folder, pool.add_student(p, name, root)
    return made


def test_three_students_at_once_on_two_workers_are_graded_as_a_local_check_would(class_pool, students):
    p, _ = class_pool
    got, three = {}, dict(list(students.items())[:3])
    threads = [threading.Thread(target=lambda n=n, f=f, t=t: got.update({n: remote.check(f, t, 120, True, seed=7)}))
               for n, (f, t) in three.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    local = {k: exercise.grade(students[n][0], "cpu", n, lambda *a, **kw: None, seed=7) for k, n in ((0, "ada"), (1, "bob"))}
    for k, name in enumerate(three):
        rec, here = got[name], local[k % 2]
        assert (rec["student"], rec["passed"], rec["checked"], rec["seed"]) == (name, here["passed"], here["checked"], 7)
        assert rec["worker"].startswith(socket.gethostname()) and " CPU " in rec["worker"]
        assert json.loads((p.results / name / "sum-cpp.json").read_text())["passed"] == rec["passed"]
    assert local[1]["passed"] < local[1]["checked"] and local[0]["passed"] == local[0]["checked"]
    assert (p.folder / "grade-builds" / "ada" / "locks").is_dir()  # graded in the sandbox, built in a cache of her own
    shown = kplay("board", "--pool", p.folder, "--out", p.folder.parent / "board")
    assert shown.returncode == 0, shown.stderr
    assert len((p.folder.parent / "board" / "board.csv").read_text().splitlines()) == 1 + 3


def test_the_cli_prints_what_a_local_check_prints_and_the_worker(class_pool, students):
    folder, token = students["ada"]
    pooled, local = kplay("check", folder, "--pool", token, "--seed", 3), kplay("check", folder, "--name", "ada", "--seed", 3)
    assert pooled.returncode == local.returncode == 0, pooled.stderr
    last = lambda text: [line.split(" · ")[0] for line in text.splitlines() if "cases passed" in line]  # noqa: E731
    assert last(pooled.stdout) == last(local.stdout) != []
    assert "graded on the pool's" in pooled.stdout and "as ada" in pooled.stdout and "drawn at seed 3" in pooled.stdout


def test_a_worker_killed_mid_grade_the_grade_finishes_on_the_other(class_pool, students):
    p, _ = class_pool
    folder, token = students["cy"]
    got = []
    thread = threading.Thread(target=lambda: got.append(remote.check(folder, token, 120, True)))
    thread.start()
    busy = until(lambda: next((w for w in pool.status(p)["workers"] if w["grading"]), None), every=0.05)
    os.kill(busy["pid"], signal.SIGKILL)
    thread.join(300)
    assert len(got) == 1 and got[0]["passed"] == got[0]["checked"]  # one answer, and a whole one
    assert got[0]["worker"] != busy["name"]
    until(lambda: len(pool.status(p)["workers"]) == 2)  # the supervisor started the killed one again


def test_no_token_another_pools_token_and_a_stranger_are_refused(class_pool, students, tmp_path):
    p, _ = class_pool
    folder, token = students["dee"]
    forged = json.loads(token.read_text())
    for bad, said in (("", "no token"), ("x" * 32, "not one of this pool's")):
        (tmp_path / "bad").write_text(json.dumps({**forged, "token": bad}))
        with pytest.raises(UsageError, match=said):
            remote.check(folder, tmp_path / "bad", 120, True)
    other = pool.create(tmp_path / "other", "127.0.0.1", free_port(), free_port())
    theirs = json.loads(pool.add_student(other, "dee", tmp_path).read_text())["token"]
    (tmp_path / "bad").write_text(json.dumps({**forged, "token": theirs}))  # their token, sent to this pool
    with pytest.raises(UsageError, match="not one of this pool's"):
        remote.check(folder, tmp_path / "bad", 120, True)
    (tmp_path / "bad").write_text(json.dumps({**forged, "ca": (tmp_path / "other" / "ca.pem").read_text()}))
    with pytest.raises(UsageError, match="cannot be reached.*CERTIFICATE_VERIFY_FAILED"):
        remote.check(folder, tmp_path / "bad", 120, True)  # a server this student's CA did not sign is not trusted


def test_a_dask_client_without_the_class_certificate_is_refused(class_pool, tmp_path):
    from distributed import Client, Security

    p, _ = class_pool
    config = p.config
    other = pool.create(tmp_path / "other", "127.0.0.1", free_port(), free_port())
    stranger = Security(require_encryption=True, tls_ca_file=str(p.folder / "ca.pem"),  # trusts the pool, is not known
                        tls_client_cert=str(other.folder / "cluster.pem"), tls_client_key=str(other.folder / "cluster.key"))
    for address, security in ((f"tls://127.0.0.1:{config['port']}", stranger), (f"tcp://127.0.0.1:{config['port']}", None)):
        with pytest.raises(Exception):
            Client(address, security=security, timeout=5, set_as_default=False)


def test_nothing_outside_the_exercises_files_is_taken():
    with pytest.raises(endpoint.Refused, match="takes only sum.cpp; not spec.py"):
        endpoint.submission({"family": "sum", "variant": "cpp", "files": {"spec.py": "import os"}})
    with pytest.raises(endpoint.Refused, match=r"takes only 6_warptile.cu, .*; not warptile.cu .*kplay start linear/cuda-warptile"):
        endpoint.submission({"family": "linear", "variant": "cuda-warptile", "files": {"warptile.cu": ""}})  # renamed
    with pytest.raises(endpoint.Refused, match="not an exercise of this pool"):
        endpoint.submission({"family": "../../etc", "variant": "cpp", "files": {}})
    with pytest.raises(endpoint.Refused, match=r"sum.cpp: a file is at most 256 KB \(this one: 257 KB\)"):
        endpoint.submission({"family": "sum", "variant": "cpp", "files": {"sum.cpp": "x" * (257 << 10)}})
    with pytest.raises(UsageError, match="student name"):
        pool.add_student(pool.Pool(ROOT), "../ada", ROOT)


def test_a_family_found_outside_kplays_own_is_not_an_exercise_of_the_pool(tmp_path, monkeypatch):
    """A student's own task.toml (say under /tmp on the server) would carry its own tolerances: refused, and a path
    in the name answers nothing about the server's files."""
    shutil.copytree(ROOT / "snippets" / "sum", tmp_path / "sum")
    for family in (str(tmp_path / "sum"), "/etc", "sum/../sum"):
        with pytest.raises(endpoint.Refused, match="not an exercise of this pool") as refused:
            endpoint.submission({"family": family, "variant": "cpp", "files": {}})
        assert "exist" not in str(refused.value) and "task.toml" not in str(refused.value)
    monkeypatch.setenv("KPLAY_PATH", str(tmp_path))
    with pytest.raises(endpoint.Refused, match="not one of kplay's own"):
        endpoint.editable("sum", "cpp")  # a folder on KPLAY_PATH shadowing the built-in sum


def test_two_writers_of_one_record_at_once_leave_it_whole(tmp_path):
    path = tmp_path / "sum-cpp.json"

    def write(k):
        for _ in range(50):
            endpoint.write_whole(path, json.dumps({"writer": k, "pad": "x" * 4096}), 0o644)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads(path.read_text())["writer"] in range(4) and list(tmp_path.iterdir()) == [path]


def test_a_negative_length_is_refused_before_the_body_is_read(class_pool):
    import ssl

    p, _ = class_pool
    context = ssl.create_default_context(cadata=(p.folder / "ca.pem").read_text())
    context.check_hostname = False
    with socket.create_connection(("127.0.0.1", p.config["endpoint_port"])) as raw, context.wrap_socket(raw) as tls:
        tls.sendall(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n" + b"x" * 1000)
        assert b" 413 " in tls.recv(4096).split(b"\r\n")[0]


def test_a_submission_too_large_gets_its_own_line_before_it_is_sent_and_after():
    """The client measures first (a refusal mid-upload would reach it as a reset connection)."""
    nowhere = {"token": "t", "ca": "", "endpoint": "https://127.0.0.1:9"}  # never reached
    with pytest.raises(UsageError, match=r"^a submission is at most 1 MB \(this one: 2.0 MB\)$"):
        remote._post(nowhere, "/run", {"files": {f"k{i}.cu": "x" * (200 << 10) for i in range(10)}})
    with pytest.raises(UsageError, match=r"^big.cu: a file is at most 256 KB \(this one: 300 KB\)$"):
        remote._post(nowhere, "/run", {"files": {"big.cu": "x" * (300 << 10)}})


def test_a_413_is_read_even_mid_upload(class_pool):
    import ssl

    p, _ = class_pool
    context = ssl.create_default_context(cadata=(p.folder / "ca.pem").read_text())
    context.check_hostname = False
    with socket.create_connection(("127.0.0.1", p.config["endpoint_port"])) as raw, context.wrap_socket(raw) as tls:
        tls.sendall(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (2 << 20) + b"x" * (2 << 20))
        reply = b""
        while chunk := tls.recv(65536):  # the endpoint closes the connection after its answer
            reply += chunk
        assert b" 413 " in reply.split(b"\r\n")[0] and b"(this one: 2.0 MB)" in reply, reply[:300]


def test_no_ca_key_on_the_server_and_no_token_file_in_the_pool_folder(class_pool, students):
    p, _ = class_pool
    assert (p.folder / "ca.pem").exists() and not (p.folder / "ca.key").exists()
    from playground import engine

    written = engine.add_students(p.folder, ["zed"], None)  # the default --out
    assert written == [p.folder.parent / f"{p.folder.name}-tokens" / "zed.kplay-token"] and written[0].exists()
    assert not list(p.folder.rglob("*.kplay-token"))


def test_300_idle_connections_from_one_address_do_not_keep_a_student_out(class_pool, students):
    """No TLS, no token, held open from 127.0.0.2 (the per-address limit, the idlest closed first): a student
    from 127.0.0.1 is graded as if they were not there."""
    p, _ = class_pool
    flood = []
    try:
        for _ in range(300):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", p.config["endpoint_port"]))
            flood.append(s)
        folder, token = students["ada"]
        rec = remote.check(folder, token, 120, True, seed=3)
        assert rec["student"] == "ada" and rec["passed"] == rec["checked"]
    finally:
        for s in flood:
            s.close()


def test_host_binds_that_address_only(class_pool):
    """--host 127.0.0.1: the scheduler and the endpoint listen there, not on every address (0.0.0.0)."""
    p, _ = class_pool
    ports = {p.config["port"], p.config["endpoint_port"]}
    listening = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:] + Path("/proc/net/tcp6").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port = local.rsplit(":", 1)
        if state == "0A" and int(port, 16) in ports:
            listening.setdefault(int(port, 16), set()).add(address)
    assert listening == {port: {"0100007F"} for port in ports}, listening


def test_a_restarted_scheduler_loses_no_result_and_no_student_waits(class_pool, students):
    p, _ = class_pool
    folder, token = students["eve"]
    got = []
    thread = threading.Thread(target=lambda: got.append(_outcome(folder, token)))
    thread.start()
    until(lambda: any(w["grading"] for w in pool.status(p)["workers"]), every=0.05)
    kept = sorted(p.results.glob("*/*.json"))
    scheduler = int(subprocess.run(["pgrep", "-f", f"playground.pool.cluster scheduler {p.folder}"], capture_output=True,
                                   text=True).stdout.split()[0])
    os.kill(scheduler, signal.SIGKILL)
    thread.join(120)
    assert got and ("send it again" in got[0] or got[0] == "graded"), got  # told to resubmit, or graded: never left waiting
    until(lambda: len(pool.status(p)["workers"]) == 2, seconds=120)  # the supervisor brought them all back
    assert sorted(p.results.glob("*/*.json")) == kept or len(sorted(p.results.glob("*/*.json"))) >= len(kept)
    again = remote.check(folder, token, 120, True)
    assert again["student"] == "eve" and again["passed"] == again["checked"]


def _outcome(folder, token) -> str:
    try:
        remote.check(folder, token, 120, True)
        return "graded"
    except UsageError as e:
        return str(e)


def test_run_on_the_pool_a_built_in_family_and_a_folder_with_a_compile_error(class_pool, students, tmp_path):
    _, token = students["fay"]
    ran = kplay("run", "sum", "--n", "1e5", "--pool", token)
    assert ran.returncode == 0 and "ran on the pool's" in ran.stdout and "PASS" in ran.stdout, ran.stderr
    folder = tmp_path / "mine"
    assert kplay("eject", "sum", folder, "--variant", "cpp").returncode == 0
    (folder / "sum.cpp").write_text((folder / "sum.cpp").read_text() + "\nthis is not C++;\n")
    broken = kplay("run", folder, "--pool", token, "--no-bench")
    assert broken.returncode == 3 and "sum.cpp" in broken.stderr, broken.stderr
    with pytest.raises(endpoint.Refused, match="not a file name"):
        endpoint.run_submission({"request": {"family": "sum", "device": "cpu"}, "files": {"../x": ""}})
    with pytest.raises(endpoint.Refused, match="a family's name"):
        endpoint.run_submission({"request": {"family": "../sum", "device": "cpu"}, "files": {}})


def test_another_server_joins_and_the_board_follows_the_results(class_pool, tmp_path):
    p, _ = class_pool
    joined = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "pool", "join", p.folder / "join.json", "--dir",
                               tmp_path / "second", "--cpu-workers", "1", "--name", "second"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    follow = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "board", "--pool", p.folder, "--out",
                               tmp_path / "board", "--follow"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        until(lambda: len(pool.status(p)["workers"]) == 3)  # the joined server's worker is in the pool
        rows = lambda: len((tmp_path / "board" / "board.csv").read_text().splitlines())  # noqa: E731
        before = rows() if (tmp_path / "board" / "board.csv").exists() else 1  # an empty pool: no board yet
        record = json.loads((ROOT / "tests" / "data" / "board" / "bob.json").read_text())
        (p.results / "zed").mkdir()
        (p.results / "zed" / "print_array-cpp.json").write_text(json.dumps({**record, "student": "zed"}))
        until(lambda: rows() == before + 1, seconds=30)  # a result arrived: the board was written again
    finally:
        joined.terminate()
        follow.terminate()
        joined.wait(30)
        follow.wait(30)
        shutil.rmtree(p.results / "zed", ignore_errors=True)
    until(lambda: len(pool.status(p)["workers"]) == 2)  # its workers stopped with it


class _FailingClient:
    """An endpoint's Dask client, "running", whose every submit raises `error`; it notes whether it was closed."""

    status, closed = "running", False

    def __init__(self, error: Exception):
        self.error = error

    def submit(self, *args, **kwargs):
        raise self.error

    def close(self, timeout=None):
        self.closed = True


def _lost_grade(client) -> tuple:
    """A grade submitted through an endpoint holding `client`: (the refusal, the endpoint)."""
    e = endpoint.Endpoint(None, "tls://127.0.0.1:1")
    e._client = client
    with pytest.raises(endpoint.Refused) as refused:
        e.submit(print, (), "grade ada sum/cpp", False)
    return refused.value, e


def test_a_grade_lost_to_a_broken_connection_drops_the_client_so_the_next_one_connects_anew():
    broken = _FailingClient(ValueError("IOStream is not idle; cannot convert to SSL"))  # its scheduler came back
    refused, e = _lost_grade(broken)
    assert refused.status == 503 and "send it again" in str(refused)
    assert e._client is None and broken.closed  # the next request builds a new client, not the broken one


def test_a_grade_that_killed_its_workers_keeps_the_client_for_the_others_in_flight():
    from distributed import KilledWorker

    shared = _FailingClient(KilledWorker("grade ada sum/cpp", None, 3))
    refused, e = _lost_grade(shared)
    assert refused.status == 503 and e._client is shared and not shared.closed
