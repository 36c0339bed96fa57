"""Timing you can trust: warm-up, many samples, round-robin between contenders, median and IQR."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import time
from typing import Callable

from ..core.record import Stats, relative_noise
from .peaks import nvml_handle

MIN_SAMPLES = 30
MAX_SAMPLES = 2000
NOISE_TARGET = 0.01  # sampling stops once every contender's noise is below this (or the budget is spent)
MIN_CLOCK = 0.75  # samples taken while the SM clock was below this share of its maximum are dropped (nvbench's)
IDLE = ", from an idle GPU"  # said only where NVML saw no other process on the GPU (runner._neighbours)
HOLD_S = (50e-6, 1e-3)  # the GPU spins this long at least (and at most) before each timed call: see _holder


def bench(fns: dict, device: str, budget_s: float = 0.3, wall: bool = False, warm: bool = False,
          observe: Callable | None = None, noise_target: float = NOISE_TARGET,
          before: Callable | None = None) -> dict[str, Stats]:
    """Time each function, taking turns so drift hits all alike; on CUDA with events (or a synced wall clock).

    A (prepare, run) pair times run(*prepare()) alone (a backward needs a fresh graph, untimed); a list of
    them is one contender on several inputs (_turns), and observe(name, k, output) sees every timed call's
    output, untimed, and before(k) runs, untimed, just before every timed call on input k (it may change
    the input). warm (host-bound ops): each sample follows an untimed call of its own, from an idle GPU, no
    L2 flush. Sampling stops when every noise is below noise_target, or the budget is spent.
    """
    fns = {k: [as_pair(p) for p in f] if isinstance(f, list) else [as_pair(f)] for k, f in fns.items()}
    cuda = device == "cuda"
    events = cuda and not wall
    if events:
        fns[EMPTY] = [(tuple, lambda: None)]  # what the device-wide sync after the end event costs alone
    host_s = _warm_up(fns, cuda)
    clock = _SmClock() if cuda else None
    flush = _holder(host_s, clock) if events and not warm else None
    samples: dict[str, list] = {k: [] for k in fns}
    start, rounds = time.perf_counter(), 0
    turn = _turns(fns)
    while not _enough(rounds, time.perf_counter() - start, budget_s, samples, noise_target):
        mhz = clock.read() if clock else None
        for j, (name, pairs) in enumerate(fns.items()):
            k = turn(rounds, j) % len(pairs)
            ready = (lambda k=k: before(k)) if before and name != EMPTY else None
            seconds, host, out = _turn(*pairs[k], warm, cuda, events, flush, ready)
            samples[name].append((seconds, host, mhz))
            if observe and name != EMPTY:
                observe(name, k, out)
        rounds += 1
    stats = {k: _summary(v, _method(cuda, wall, flush, warm), clock) for k, v in samples.items()}
    if events:
        empty = stats.pop(EMPTY)
        stats = {k: dataclasses.replace(v, tail_floor_s=empty.tail_s) for k, v in stats.items()}
    return stats


def _warm_up(fns: dict, cuda: bool) -> float:
    """Three calls of each contender, on its inputs in turn (caches, lazy init, the allocator); returns the
    longest host time of one call, leaving out each first call (its lazy init is not a launch)."""
    import torch

    host = []
    for pairs in fns.values():
        for i, (prepare, run) in enumerate((pairs * 3)[:3]):
            args = prepare()
            t = time.perf_counter()
            run(*args)
            host += [time.perf_counter() - t] if i else []
    if cuda:
        torch.cuda.synchronize()
    return max(host, default=0.0)


def _turns(fns: dict):
    """Which input contender j times in round r: the calls take the inputs in turn, whoever makes them, so
    every call finds its input last read as many calls ago as any other contender's (a contender timed
    right after another on the same input would find it in the cache). When the contenders' count is a
    multiple of the inputs', one input is skipped each round, so no contender gets the same one twice."""
    count = len(fns) - (EMPTY in fns)
    inputs = max(len(p) for p in fns.values())
    per_round = count + (count % inputs == 0 and inputs > 1)
    return lambda r, j: r * per_round + j


def _enough(rounds: int, spent: float, budget_s: float, samples: dict, noise_target: float) -> bool:
    """At least MIN_SAMPLES, then until the budget is spent or every contender is quiet; a slow kernel stops
    at 5 samples once it has taken 20 budgets."""
    quiet = rounds >= MIN_SAMPLES and rounds % 10 == 0 and all(
        relative_noise([s[0] for s in v]) < noise_target for k, v in samples.items() if k != EMPTY)
    return rounds >= MAX_SAMPLES or (rounds >= MIN_SAMPLES and (spent >= budget_s or quiet)) or (rounds >= 5 and spent >= 20 * budget_s)


def _turn(prepare, run, warm: bool, cuda: bool, events: bool, flush, ready=None):
    """One contender's timed call (after an untimed one of its own when warm); ready() just before it."""
    import torch

    if warm:
        run(*prepare())
    if ready:
        ready()
    args = prepare()
    if warm and cuda:
        torch.cuda.synchronize()
    return _one(run, args, cuda, events, flush)


def _method(cuda: bool, wall: bool, flush, warm: bool) -> str:
    method = "perf_counter" if not cuda else "synchronized wall clock" if wall else "CUDA events"
    if flush:
        method += f", L2 flushed, queued behind a {flush.hold_s * 1e6:.0f} µs GPU spin"
    if warm:
        method += ", each call after one of its own" + (IDLE if cuda else "")
    return method


EMPTY = "(empty call)"  # bench's own contender on CUDA events: the floor of the tail


def as_pair(f):
    return f if isinstance(f, tuple) else (tuple, f)


def _summary(samples: list, method: str, clock) -> Stats:
    """Stats of the samples taken at a full clock (MIN_CLOCK of the maximum, or of the run's highest where
    the clocks are locked lower); the rest are counted as dropped."""
    seen = [s[2] for s in samples if s[2] is not None]
    full = max(clock.max_mhz or 0, 0) if clock and seen else 0
    if seen and max(seen) < MIN_CLOCK * full:
        full = max(seen)  # locked below 75% of the boost clock (nvidia-smi -lgc): that is the clock to hold
    kept = [s for s in samples if s[2] is None or s[2] >= MIN_CLOCK * full]
    mhz = sorted(s[2] for s in kept if s[2] is not None)
    return Stats.of([s[0] for s in kept], method, dropped=len(samples) - len(kept),
                    tail_s=statistics.median(s[1] for s in kept) if kept[0][1] is not None else None,
                    clock_mhz=(mhz[0], mhz[len(mhz) // 2], mhz[-1]) if mhz else None)


def _one(fn, args, cuda: bool, events: bool, flush) -> tuple[float, float | None, object]:
    """(seconds, tail seconds or None, output) of one call. With events, the tail is how long a device-wide
    sync still waits once the end event on PyTorch's stream has fired: work left on any other stream."""
    import torch

    if not events:
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn(*args)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t, None, out
    if flush:
        flush()  # still running when the call is launched: the GPU is busy, so the launch's host time is hidden
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    out = fn(*args)
    end.record()
    end.synchronize()
    t = time.perf_counter()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / 1e3, time.perf_counter() - t, out


class _SmClock:
    """The SM clock through NVML (nvidia-ml-py), where it is installed; otherwise reads None."""

    def __init__(self):
        self._nvml, self._handle, self.max_mhz = nvml_handle()

    def read(self) -> int | None:
        try:
            return self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM) if self._nvml else None
        except Exception:
            return None


def _holder(host_s: float, clock):
    """What runs before each timed call: a flush of the L2 (twice its size overwritten, so a small input is
    read from memory, as in real use), then a GPU spin of four times the longest host time of one call
    (HOLD_S bounds it). The GPU is busy while the call is launched, so the start event fires only once the
    call is queued behind it: the launch's host time stays out of the events however slow the host is, as
    behind nvbench's blocking kernel. (Without it, the events read up to 2.5x nvbench's median on the H200:
    a host path longer than the flush left the GPU idle at the start event.)"""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 64 << 20)
    junk = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    hold_s = min(max(4 * host_s, HOLD_S[0]), HOLD_S[1])
    cycles = int(hold_s * (clock.max_mhz or 2000) * 1e6)  # a lower clock than this spins longer, never shorter

    def flush():
        junk.zero_()
        torch.cuda._sleep(cycles)

    flush.hold_s = hold_s
    return flush


def copy_bandwidth(device: str) -> float:
    """The device's copy bandwidth in GB/s (bytes read + written), measured once per device and cached."""
    import torch

    from ..compiler.toolchain import cache_dir

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
        stats = bench({"copy": lambda: dst.copy_(src)}, device, budget_s=0.5)["copy"]
        known[key] = round(2 * nbytes / stats.median_s / 1e9, 1)
        with contextlib.suppress(OSError):  # an unwritable cache: measured again next time
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(known, indent=1))
    return known[key]


def _device_name(device: str) -> str:
    import os

    import torch

    from ..compiler.toolchain import cpu_model

    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{cpu_model()} x{torch.get_num_threads()} threads ({os.cpu_count()} cpus)"
