"""The record model: every record kplay makes (a timing, a check, a build, a contender, a run) and its plain JSON.

A sweep is a list of runs; a board entry and a graded exercise are built from runs (workshop/board.py,
workshop/exercise.py); --json prints these records, and the tables are built from the same data.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import asdict, dataclass, field

from .errors import CHECK_FAILED, PASSED


@dataclass(frozen=True)
class Stats:
    median_s: float
    q1_s: float
    q3_s: float
    samples: int
    method: str
    noise: float = 0.0  # the samples' relative standard deviation, as nvbench reports it
    tail_s: float | None = None  # CUDA events: the median wait of a device-wide sync after the end event had fired
    tail_floor_s: float | None = None  # the same wait after an empty call (same run): what the sync itself costs
    dropped: int = 0  # samples dropped because the SM clock was below MIN_CLOCK of its maximum
    clock_mhz: tuple | None = None  # the SM clock over the kept samples: (min, median, max), where NVML reads it

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s

    @classmethod
    def from_dict(cls, d: dict) -> Stats:
        """A record as --json wrote it (a field it does not know is left out)."""
        return cls(**{"samples": 0, "method": "", **{k: v for k, v in d.items() if k in cls.__dataclass_fields__}})

    @classmethod
    def of(cls, samples: list[float], method: str, **extra) -> Stats:
        """The median, quartiles and noise of these samples (seconds)."""
        q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else samples * 3
        return cls(median_s=med, q1_s=q1, q3_s=q3, samples=len(samples), method=method, noise=relative_noise(samples), **extra)


def relative_noise(samples: list[float]) -> float:
    """The samples' relative standard deviation (nvbench's noise), without far outliers: beyond 3 IQRs of the
    quartiles (Tukey's far fences), a sample is an interruption (the OS on a busy CPU core), not spread. A few
    of them made a CPU median's noise read 136% where its IQR was ±10%, and 'same' hide a 2x speedup."""
    if len(samples) > 3:
        q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
        samples = [s for s in samples if q1 - 3 * (q3 - q1) <= s <= q3 + 3 * (q3 - q1)]
    mean = statistics.fmean(samples) if samples else 0.0
    return statistics.stdev(samples) / mean if len(samples) > 1 and mean else 0.0


def same(a: Stats, b: Stats) -> bool:
    """Two timings are the same when their medians differ by less than the larger of their noises (relative
    standard deviations) times the smaller median, as nvbench-compare judges. The one rule for 'same': the
    run table, --against, watch and the board."""
    return abs(a.median_s - b.median_s) < max(a.noise, b.noise) * min(a.median_s, b.median_s)


@dataclass(frozen=True)
class Check:
    ok: bool
    max_abs_err: float
    tolerance: float
    tolerance_source: str
    mismatches: list[str] = field(default_factory=list)
    cases: list[str] = field(default_factory=list)  # the sizes checked, e.g. "n=1"
    failed: dict = field(default_factory=dict)  # each failing case's first message: mismatches stop at 5, cases do not

    def failing(self, reasons: list[str]) -> Check:
        """The same check, failed for these further reasons (the timing's findings, gradcheck)."""
        return dataclasses.replace(self, ok=False, mismatches=[*self.mismatches, *reasons])


CHANGED = "was changed by the kernel"  # an input that differs from its copy after the call


@dataclass(frozen=True)
class BuildInfo:
    name: str
    seconds: float
    cached: bool
    loops: list = field(default_factory=list)  # the C++ compiler's verdict on each loop of the student's files

    def with_loops(self, loops: list) -> BuildInfo:
        return BuildInfo(self.name, self.seconds, self.cached, loops)


@dataclass(frozen=True)
class Speedup:
    """A baseline's median over a contender's; `same` where the two differ by less than the noise (record.same)."""

    ratio: float
    same: bool
    noise: float  # the ratio's relative noise: the two timings' added in quadrature

    @classmethod
    def of(cls, theirs: Stats, ours: Stats) -> Speedup:
        noise = math.hypot(theirs.noise, ours.noise) if theirs is not ours else 0.0
        return cls(theirs.median_s / ours.median_s, theirs is not ours and same(theirs, ours), noise)


@dataclass(kw_only=True)
class Timed:
    """A contender's timing: the whole call, each step (forward, backward), and the rates from them."""

    time: Stats | None = None  # the call: the steps' medians added, on the clock that counts
    timings: dict = field(default_factory=dict)  # step -> Stats (CUDA events on a GPU)
    walls: dict = field(default_factory=dict)  # step -> Stats on a synchronized wall clock (tiny ops on a GPU)
    clock: str = "timings"  # which of the two counts: "walls" where they were measured
    gbps: float | None = None
    gflops: float | None = None
    pct_peak: float | None = None  # of the device's roofline at this call's intensity (GPU): see RunResult.bound
    speedups: dict = field(default_factory=dict)  # baseline -> {"call" and each step: Speedup}
    kernels: list = field(default_factory=list)  # its CUDA kernels: the build's resources, on a GPU the launches'

    @property
    def steps(self) -> dict:
        """Each step's Stats on the clock that counts."""
        return getattr(self, self.clock)

    def set_times(self, timings: dict, walls: dict) -> None:
        self.timings, self.walls = timings, walls
        self.clock = "walls" if walls else "timings"
        self.time = total(self.steps)

    def compare(self, baselines: dict) -> None:
        """Each baseline against this contender: the whole call and each step."""
        self.speedups = {name: {"call": Speedup.of(b.time, self.time),
                                **{s: Speedup.of(b.steps[s], t) for s, t in self.steps.items() if s in b.steps}}
                         for name, b in baselines.items()}


@dataclass(kw_only=True)
class BaselineResult(Timed):
    name: str


@dataclass(kw_only=True)
class VariantResult(Timed):
    variant: str
    note: str
    build: BuildInfo
    params: dict = field(default_factory=dict)  # its own parameters ([variants.NAME.params]) as built
    check: Check
    stdout: str = ""
    extra: dict = field(default_factory=dict)  # spec.extra verdicts, e.g. gradcheck
    untrusted: bool = False  # the check failed in the timing (a result kept from another call, unseen work)

    @property
    def speedup(self) -> float | None:
        """The first baseline's time over this one's, the whole call."""
        first = next(iter(self.speedups.values()), None)
        return first["call"].ratio if first else None


@dataclass
class RunResult:
    family: str
    device: str
    dtype: str
    seed: int
    sizes: dict
    params: dict  # the parameters the chosen variants use
    torch: str
    peak_gbps: float | None = None  # the device's memory bandwidth (device.py), GPU only
    peak_gflops: float | None = None  # the device's FLOP/s for this dtype on the CUDA cores, GPU only
    peak_source: dict = field(default_factory=dict)  # how each peak was computed, from the device's attributes
    copy_gbps: float | None = None  # a device-to-device copy, measured here: a second, attainable reference
    traffic: int | None = None  # bytes per timed call (spec.traffic)
    flops: int | None = None  # FLOP per timed call (spec.flops)
    bound: str | None = None  # "memory" or "compute": the ceiling that limits a call at this intensity (GPU)
    inputs_timed: int = 0  # the seeded inputs the timed calls took turns on
    baselines: dict = field(default_factory=dict)  # name -> BaselineResult
    variants: list[VariantResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    lease: dict = field(default_factory=dict)  # device, waited_s, timed_from, timed_to (epoch s): the timed phase
    not_timed: list[str] = field(default_factory=list)  # the variants left out of a timing: they failed the check
    neighbours: dict = field(default_factory=dict)  # who else used the device while timing (neighbours.Seen)
    other_dtypes: list[str] = field(default_factory=list)  # --variant all, no --dtype: the other variants' own dtypes

    @property
    def ok(self) -> bool:
        return all(v.check.ok for v in self.variants)

    @property
    def exit_code(self) -> int:
        return PASSED if self.ok else CHECK_FAILED

    @property
    def rate(self) -> str | None:
        """The rate a table shows, "gbps" or "gflops": the ceiling that binds on a GPU; without a peak (the CPU),
        GFLOP/s for a call of at least one FLOP per byte."""
        if self.flops and self.traffic:
            return "gflops" if (self.bound == "compute" if self.bound else self.flops >= self.traffic) else "gbps"
        return "gflops" if self.flops else "gbps" if self.traffic else None

    @property
    def why(self) -> str | None:
        """The verdict's reason, in a few words (None on a pass)."""
        failed = [v for v in self.variants if not v.check.ok]
        if not failed:
            return None
        if all(v.untrusted for v in failed):
            return "the timing cannot be trusted"
        said = [m for v in failed for m in v.check.failed.values()]
        changed = [m for m in said if CHANGED in m]
        if changed and len(changed) == len(said):
            return "the kernel changed its input"
        return "the output does not match the reference" + (", and the kernel changed its input" if changed else "")

    def to_dict(self) -> dict:
        """Plain JSON data: what --json prints and the tables are built from (inf and NaN become null)."""
        variants = [{**asdict(v), "speedup": v.speedup} for v in self.variants]
        return _finite({**asdict(self), "variants": variants, "ok": self.ok, "exit_code": self.exit_code,
                        "why": self.why, "rate": self.rate})


def _finite(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def total(timings: dict) -> Stats:
    """One step's stats, or the sum of the steps' (forward + backward) as one record."""
    if len(timings) == 1:
        return next(iter(timings.values()))
    parts = list(timings.values())
    median = sum(t.median_s for t in parts)
    noise = math.sqrt(sum((t.noise * t.median_s) ** 2 for t in parts)) / median if median else 0.0  # independent steps
    clocks = [t.clock_mhz for t in parts if t.clock_mhz]  # the SM clock over every step's samples
    middle = sorted(c[1] for c in clocks)[len(clocks) // 2] if clocks else None
    clock = (min(c[0] for c in clocks), middle, max(c[2] for c in clocks)) if clocks else None
    return Stats(median, sum(t.q1_s for t in parts), sum(t.q3_s for t in parts), min(t.samples for t in parts),
                 parts[0].method + ", " + " + ".join(timings), noise=noise, dropped=max(t.dropped for t in parts),
                 clock_mhz=clock)
