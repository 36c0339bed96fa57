"""Who else used the device while kplay timed: the load on the timed CPU cores, NVML's processes on the GPU."""

import subprocess
import sys
import time

import pytest

from playground.run import contention as neighbours, runner

SPIN = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
HOLD_GPU = "import time, torch\ntorch.zeros(1, device='cuda')\nprint('held', flush=True)\ntime.sleep(60)"


def test_a_process_spinning_on_the_timed_cores_is_reported():
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)
        with neighbours.Watch("cpu", host=True) as watch:
            time.sleep(1.0)  # this process idle: only the spinner (and whatever else runs) is busy
    finally:
        spinner.kill()
    seen = watch.seen
    assert seen.cores >= 1 and seen.cpu_busy > neighbours.BUSY, seen
    assert seen.warning() == (f"other processes kept the {seen.cores} timed CPU core{'s' * (seen.cores > 1)} "
                              f"{100 * seen.cpu_busy:.0f}% busy while timing: times may be high")


def test_this_processes_own_work_is_not_counted_as_another():
    """Readings (seconds, {core: busy seconds}, this process's CPU seconds): 1.5 s busy of which 1 s its own."""
    before, after = (100.0, {0: 10.0, 1: 20.0}, 1.0), (101.0, {0: 11.0, 1: 20.5}, 2.0)
    assert neighbours._others_share(before, after) == (0.25, 2)  # 0.5 s of others' work on 2 cores in 1 s


def test_only_a_gpu_nvml_saw_alone_is_called_idle():
    assert neighbours.Seen(gpu_others=0).idle_gpu() and neighbours.Seen(gpu_others=0).warning() is None
    assert not neighbours.Seen(gpu_others=None, note="NVML not available").idle_gpu()
    assert neighbours.Seen(gpu_others=2).warning() == "2 other processes used the GPU while timing: times may be high"
    assert neighbours.Seen(gpu_others=1).warning().startswith("1 other process used")


@pytest.mark.cuda
def test_another_process_on_the_gpu_is_reported_and_idle_is_said_only_without_one():
    """Runs alone on the GPU box (benchmarks/gpu_all.sh's serial group): no other test's process is on it. lltm's
    tiny ops are timed host-bound, each call after one of its own, where "from an idle GPU" is claimed."""
    def run() -> tuple[dict, list[str]]:
        r = runner.run("lltm", device="cuda", variant="cuda").to_dict()
        return r, [t["method"] for v in r["variants"] for clock in ("timings", "walls") for t in v[clock].values()]

    alone, methods = run()
    assert alone["neighbours"]["gpu_others"] == 0 and alone["neighbours"]["gpu_samples"] >= 2, alone["neighbours"]
    assert any("from an idle GPU" in m for m in methods), methods
    other = subprocess.Popen([sys.executable, "-c", HOLD_GPU], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        shared, methods = run()
    finally:
        other.kill()
    assert shared["neighbours"]["gpu_others"] == 1, shared["neighbours"]
    assert "1 other process used the GPU while timing: times may be high" in shared["warnings"]
    assert not any("idle" in m for m in methods) and any("shared with 1 other process" in m for m in methods), methods
