"""kplay watch: the loop on a fake change stream (scalar → SIMD → syntax error), bad input, real watchfiles."""

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console

from conftest import ROOT
from playground.child import spawn as isolate

# The ejected sum.cpp with its SIMD lanes and threads replaced by one scalar loop (strict IEEE order: the
from playground.family import request
from playground.workshop import watch
# compiler cannot vectorize it), as a student might write it first.
SCALAR = """
template <typename T>
double sum_all(const T* x, int64_t n) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}
"""


def scalar(source: str) -> str:
    start = source.index("// One partial sum per chunk")
    end = source.index("// A 0-d tensor")
    return source[:start] + SCALAR + "\n" + source[end:]


def text(renderable) -> str:
    console = Console(width=80, record=True, color_system=None, file=open(os.devnull, "w"))
    console.print(renderable)
    return console.export_text()


@pytest.fixture
def ejected(kplay, tmp_path):
    target = tmp_path / "mysum"
    assert kplay("eject", "sum", target, "--variant", "cpp").exit_code == 0
    return target


def test_loop_says_faster_then_shows_the_compile_error_and_goes_on(ejected, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # SIMD lanes against a scalar loop: threads on shared cores only add noise
    src = ejected / "sum.cpp"
    simd = src.read_text()
    src.write_text(scalar(simd))

    def saves():
        src.write_text(simd)
        yield {str(src)}
        src.write_text(simd.replace("return out;", "return out"))  # a missing semicolon
        yield {str(src)}
        src.write_text(simd)
        yield {str(src)}

    def attempt():
        req = request.make(str(ejected), device="cpu", sizes={"n": "1e6"}, skip_baselines=["torch.sum"])
        return isolate.run(req)

    first, faster, broken, fixed = list(watch.loop(attempt, saves()))
    assert first.result["ok"] and first.before == {}
    assert "the first passing version" in text(watch.render(first))
    assert faster.before["cpp"] == first.result["variants"][0]["time"]
    shown = text(watch.render(faster))
    assert "faster than the last passing version" in shown and "saved sum.cpp" in shown, shown
    assert broken.result is None and "compile error in sum.cpp" in str(broken.error)
    assert "|   return out" in text(watch.render(broken))  # the compiler's source line, under its error
    assert fixed.result["ok"] and fixed.before["cpp"] == faster.result["variants"][0]["time"]  # the broken one skipped


def test_loop_keeps_the_last_passing_time_across_a_failed_check():
    def record(ok, median):
        t = {"median_s": median, "q1_s": median * 0.99, "q3_s": median * 1.01, "noise": 0.01}
        return {"ok": ok, "variants": [{"variant": "cpp", "check": {"ok": ok}, "time": t}]}

    runs = iter([record(True, 2e-4), record(False, 1e-5), record(True, 1e-4)])
    outcomes = list(watch.loop(lambda: next(runs), iter([{"a.cpp"}, {"a.cpp"}])))
    assert [o.before.get("cpp", {}).get("median_s") for o in outcomes] == [None, None, 2e-4]
    line = watch.comparison("cpp", outcomes[2].result["variants"][0]["time"], outcomes[2].before["cpp"]).plain
    assert line == "cpp: 100 µs, 2.0× faster than the last passing version (200 µs)"


@pytest.mark.parametrize("make, message", [
    (lambda p: p, "is not a kernel folder: it has no task.toml"),
    (lambda p: p / "missing", "no such folder"),
])
def test_watch_bad_folder_is_one_line_and_exit_2(kplay, tmp_path, make, message):
    result = kplay("watch", make(tmp_path))
    assert result.exit_code == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_watch_without_watchfiles_says_so_before_any_run(kplay, ejected, monkeypatch):
    monkeypatch.setitem(sys.modules, "watchfiles", None)  # import watchfiles now raises ImportError
    monkeypatch.setattr("playground.child.spawn.warm", lambda: pytest.fail("a worker was started"))
    result = kplay("watch", ejected, "--no-bench")
    assert result.exit_code == 2 and "kplay watch needs watchfiles" in result.stderr, result.output
    assert "watching" not in result.output and "compiled" not in result.output


def settle(lines, quiet=5.0, most=90.0):
    """Wait until the child has printed nothing for `quiet` seconds, and its last line says it is watching."""
    start, last, said = time.monotonic(), time.monotonic(), "watching"  # the caller has just seen it
    while time.monotonic() - start < most and (time.monotonic() - last < quiet or "watching" not in said):
        try:
            said, last = lines.get(timeout=0.5), time.monotonic()
        except queue.Empty:
            pass


@pytest.mark.slow  # -m "not slow": the loop test above runs watch's loop, the bad-folder tests the command
def test_watch_reruns_on_a_save_and_ctrl_c_exits_0(ejected, tmp_path):
    """The real command: watchfiles sees the touch, a second run follows; SIGINT ends it with exit 0. The child
    starts with SIGINT ignored, as a non-interactive shell leaves it for a job it puts in the background (CI):
    Python then installs no KeyboardInterrupt handler, and watch must set one itself."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "NO_COLOR": "1"}
    child = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "watch", str(ejected), "--n", "1e3", "--no-bench"],
                             stdout=subprocess.PIPE, stderr=(tmp_path / "stderr").open("w"), text=True, env=env,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    # stderr to a file: the progress lines would fill an unread pipe and block the child
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in child.stdout], daemon=True).start()

    def wait_for(word, seconds=60, poke=lambda: None):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            poke()
            try:
                if word in lines.get(timeout=1):
                    return True
            except queue.Empty:
                pass
        return False

    try:
        assert wait_for("watching for the next save")
        # the watcher starts just after the first run: touch until it has seen one (later touches are batched)
        assert wait_for("run 2 · saved sum.cpp", poke=(ejected / "sum.cpp").touch)
        assert wait_for("watching for the next save")
        settle(lines)  # touches the watcher batched during run 2 start a run 3: Ctrl-C once it is idle again
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=20) == 0
        assert "Traceback" not in (tmp_path / "stderr").read_text()
    finally:
        if child.poll() is None:
            child.kill()


def test_a_newer_save_stops_a_hung_run_and_its_child(ejected):
    """isolate.stopped_by, as watch uses it: the hung call ends within a poll of the save, not at its --timeout."""
    import shutil

    from playground.core.errors import KernelCrash

    shutil.copy(ROOT / "tests" / "wrong" / "sum" / "sum_hang.cpp", ejected / "sum.cpp")
    with pytest.raises(KernelCrash):  # builds it; the hang is stopped by its timeout
        isolate.run(request.make(str(ejected), device="cpu", bench=False, timeout=1))
    began = time.monotonic()
    with isolate.stopped_by(lambda: time.monotonic() - began > 1.0), pytest.raises(isolate.Superseded) as stopped:
        isolate.run(request.make(str(ejected), device="cpu", bench=False, timeout=60))
    assert time.monotonic() - began < 3.0, "the hung run outlived the newer save"
    assert re.fullmatch(r"stopped while checking cpp at n=1 \S+: a newer save came in", str(stopped.value)), stopped.value


@pytest.mark.slow  # the real command and watchfiles: the test above stops a run the way watch does
def test_a_fix_saved_during_a_hung_watch_run_passes_within_10_s(ejected, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "NO_COLOR": "1"}
    fixed = (ejected / "sum.cpp").read_text()
    (ejected / "sum.cpp").write_text((ROOT / "tests" / "wrong" / "sum" / "sum_hang.cpp").read_text())
    child = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "watch", str(ejected), "--n", "1e3", "--no-bench"],
                             stdout=subprocess.PIPE, stderr=(tmp_path / "stderr").open("w"), text=True, env=env)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in child.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + 90
        while "✓ cpp:" not in (tmp_path / "stderr").read_text() and time.monotonic() < deadline:
            time.sleep(0.2)  # the hung kernel is built; its check at n=1 begins and hangs
        time.sleep(1.5)
        (ejected / "sum.cpp").write_text(fixed)
        saved, said = time.monotonic(), []
        while time.monotonic() - saved < 30 and not any(ln.startswith("PASS") for ln in said):
            try:
                said.append(lines.get(timeout=0.5))
            except queue.Empty:
                pass
        took = time.monotonic() - saved
        assert any("stopped while checking cpp" in ln for ln in said) and took < 10, (took, said)
    finally:
        child.kill()
