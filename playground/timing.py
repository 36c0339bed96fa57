"""Timing you can trust: warm-up, many samples, round-robin between contenders, median and IQR."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import Callable

MIN_SAMPLES = 30
MAX_SAMPLES = 2000


@dataclass(frozen=True)
class Stats:
    median_s: float
    q1_s: float
    q3_s: float
    samples: int
    method: str

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s


def _stats(samples: list[float], method: str) -> Stats:
    q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else samples * 3
    return Stats(median_s=med, q1_s=q1, q3_s=q3, samples=len(samples), method=method)


def bench(fns: dict[str, Callable | tuple[Callable, Callable]], device: str, budget_s: float = 0.3,
          working_set: int = 0, wall: bool = False, warm: bool = False) -> dict[str, Stats]:
    """Time each function, taking turns so drift hits all alike; on CUDA with events (or a synced wall clock).

    A (prepare, run) pair times run(*prepare()) alone: a backward needs a fresh graph, untimed.
    warm (for host-bound ops): each sample follows one untimed call of the same function, as when a model
    runs one op step after step (otherwise it follows another contender's, and pays for the CPU's cold
    caches), and starts from an idle GPU, so the host's path to the first kernel counts in the events too;
    no L2 flush: a model's weights stay in the cache from step to step.
    """
    fns = {k: f if isinstance(f, tuple) else (tuple, f) for k, f in fns.items()}
    import torch

    cuda = device == "cuda"
    flush = _l2_flusher(working_set) if cuda and not wall and not warm else None
    method = "perf_counter" if not cuda else "synchronized wall clock" if wall else "CUDA events"
    if flush:
        method += ", L2 flushed"
    if warm:
        method += ", each call after one of its own, from an idle GPU" if cuda else ", each call after one of its own"
    for prepare, run in fns.values():  # warm-up: caches, lazy init, allocator
        for _ in range(3):
            run(*prepare())
    if cuda:
        torch.cuda.synchronize()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    start = time.perf_counter()
    while True:
        for name, (prepare, run) in fns.items():
            args = prepare()
            if warm:
                run(*args)
                args = prepare()
                if cuda:
                    torch.cuda.synchronize()
            samples[name].append(_one(run, args, cuda, wall, flush))
        n, spent = len(samples[name]), time.perf_counter() - start
        if n >= MAX_SAMPLES or (n >= MIN_SAMPLES and spent >= budget_s) or (n >= 5 and spent >= 20 * budget_s):
            break
    return {k: _stats(v, method) for k, v in samples.items()}


def _one(fn, args, cuda: bool, wall: bool, flush) -> float:
    import torch

    if not cuda or wall:
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn(*args)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t
    if flush:
        flush()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn(*args)
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3


def _l2_flusher(working_set: int):
    """Between samples, overwrite twice the L2 so a small input is read from memory, as in real use."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 64 << 20)
    if working_set > 4 * l2:
        return None
    junk = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    return junk.zero_


def copy_bandwidth(device: str) -> float:
    """The device's copy bandwidth in GB/s (bytes read + written), measured once per device and cached."""
    import torch

    from .toolchain import cache_dir

    key = f"{_device_name(device)} | torch {torch.__version__}"
    path = cache_dir() / "bandwidth.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        nbytes = (1 << 30) if device == "cuda" else (256 << 20)
        src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
        dst = torch.empty_like(src)
        stats = bench({"copy": lambda: dst.copy_(src)}, device, budget_s=0.5, working_set=2 * nbytes)["copy"]
        known[key] = round(2 * nbytes / stats.median_s / 1e9, 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known, indent=1))
    return known[key]


def _device_name(device: str) -> str:
    import os

    import torch

    from .toolchain import cpu_model

    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{cpu_model()} x{torch.get_num_threads()} threads ({os.cpu_count()} cpus)"
