"""Who else used the device while kplay timed: NVML's compute processes on the GPU, sampled through the timed
phase (a snapshot misses a short visitor), and the load on the CPU cores kplay times on.

Inside a PID namespace NVML reports the host's pids, so this run is not found by its pid: the processes
seen, all samples together, less one (this run's own context) are the others. Under MIG, NVML is asked about
this run's instance; under MPS it sees only the MPS server, which hides who its clients are (the record says so).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass

SAMPLE_S = 0.1  # NVML's compute processes are listed this often while timing (and at its start and end)
BUSY = 0.10  # other processes' share of the timed cores' time above which a CPU-side timing is flagged


@dataclass
class Seen:
    """What was on the device besides this run, over the timed phase."""

    gpu_others: int | None = None  # other processes with a context on the GPU (None: not known, or a CPU run)
    gpu_samples: int = 0
    cpu_busy: float | None = None  # other processes' share of the timed cores' time (None: not read)
    cores: int = 0
    note: str | None = None  # why a count is missing, or what it cannot see (MPS)

    def warning(self) -> str | None:
        """One line for the report when anything else was there: the numbers may be high."""
        if self.gpu_others:
            s = "es" if self.gpu_others > 1 else ""
            return f"{self.gpu_others} other process{s} used the GPU while timing: times may be high"
        if self.cpu_busy is not None and self.cpu_busy > BUSY:
            return (f"other processes kept the {self.cores} timed CPU core{'s' * (self.cores > 1)} "
                    f"{100 * self.cpu_busy:.0f}% busy while timing: times may be high")
        return None

    def idle_gpu(self) -> bool:
        """Whether the GPU is known to have had no other process on it: the only case that says "idle"."""
        return self.gpu_others == 0

    def to_dict(self) -> dict:
        return asdict(self)


class Watch:
    """Samples the device from a thread while the `with` body times; `.seen` afterwards."""

    def __init__(self, device: str, host: bool):
        self.device, self.host, self.seen = device, host, Seen()
        self._stop, self._pids, self._thread = threading.Event(), set(), None

    def __enter__(self) -> Watch:
        self._cpu = _cpu_times() if self.host or self.device == "cpu" else None
        self._nvml = _nvml() if self.device == "cuda" else None
        if self._nvml:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        elif self.device == "cuda":
            self.seen.note = "NVML not available (pip install 'kplay[gpu]'): other processes on the GPU not counted"
        return self

    def __exit__(self, *exc) -> None:
        if self._thread:
            self._stop.set()
            self._thread.join()
            mps = any(_name(self._nvml[0], pid) == "nvidia-cuda-mps-server" for pid in self._pids)
            if mps:
                self.seen.note = "under MPS, NVML sees only the MPS server: its clients cannot be counted"
            elif not self._pids:
                self.seen.note = "NVML lists no processes on this GPU here (a container?): others not counted"
            else:
                self.seen.gpu_others = len(self._pids) - 1
        if self._cpu:
            self.seen.cpu_busy, self.seen.cores = _others_share(self._cpu, _cpu_times())

    def _sample(self) -> None:
        """List the GPU's compute processes at the start, every SAMPLE_S, and once more at the end."""
        nvml, handle = self._nvml
        done = False
        while True:
            try:
                self._pids |= {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
                self.seen.gpu_samples += 1
            except Exception:  # a driver too old for the call: the samples say how many answered
                pass
            if done:
                return
            done = self._stop.wait(SAMPLE_S)


def _nvml():
    """(pynvml, handle) of this run's GPU (its MIG instance under MIG), or None without NVML."""
    from .peaks import nvml_handle

    nvml, handle, _ = nvml_handle()
    return (nvml, handle) if nvml else None


def _name(nvml, pid: int) -> str:
    try:
        name = nvml.nvmlSystemGetProcessName(pid)
        return os.path.basename(name.decode() if isinstance(name, bytes) else name)
    except Exception:
        return ""


def _cpu_times():
    """(monotonic s, busy s of each core this process may run on, this process's CPU s), or None off Linux."""
    try:
        cores = os.sched_getaffinity(0)
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3].isdigit()]
    except (AttributeError, OSError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    busy = {int(p[0][3:]): (sum(map(int, p[1:9])) - int(p[4]) - int(p[5])) / tick for p in lines}  # less idle, iowait
    own = os.times()
    return time.monotonic(), {c: busy[c] for c in cores if c in busy}, own.user + own.system


def _others_share(before, after) -> tuple[float, int]:
    """Other processes' share of the timed cores' time between two readings (this process's own CPU time out)."""
    wall = after[0] - before[0]
    cores = before[1].keys() & after[1].keys()
    busy = sum(after[1][c] - before[1][c] for c in cores) - (after[2] - before[2])
    return (max(0.0, busy) / (wall * len(cores)) if wall > 0 and cores else 0.0), len(cores)
