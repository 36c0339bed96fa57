"""Whether a timing can be trusted: fresh inputs for every call, each timed output checked, no unseen work,
no rate above the device's ceilings. Each finding is a line that fails the check."""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..family import data
from ..family import spec as specs
from .check import as_tuple

# The timed inputs together exceed this where memory allows: on a GPU any L2 (the H200's is 50 MB); on a CPU
# 64 MB (a laptop's last-level cache is 8-36 MB), or four times the last-level cache where Linux says more.
POOL_BYTES = {"cuda": 256 << 20, "cpu": 64 << 20}
POOL_MAX = 8  # but there are never more than this many (each costs a make_inputs and a reference)


def pool(spec, req, main, dtype, device, nbytes, contenders: int, alive=lambda: None) -> list:
    """The inputs the timed calls take turns on: `main` and copies of it, so that no two consecutive calls see
    the same pointer (TimedOutputs.change makes their contents differ before every call). Their count does
    not divide the contenders' (see timing._turns), and takes a quarter of the free memory at most."""
    import torch

    target = POOL_BYTES[device] if device == "cuda" else max(POOL_BYTES["cpu"], 4 * _last_level_cache())
    want = max(3, min(POOL_MAX, -(-target // max(nbytes, 1))))
    want = next(k for k in range(want, want + contenders + 1) if contenders % k)
    count = max(1, min(want, _free_bytes(device) // 4 // max(nbytes, 1)))
    made = [main]
    for _ in range(1, count):
        made.append(tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in main))
        alive()  # each copy takes a while at 1e8: --timeout bounds a call, not this
    return made


def _last_level_cache() -> int:
    """The CPU's largest cache in bytes, from Linux's sysfs (e.g. '32768K'); 0 where it cannot be read."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        with contextlib.suppress(OSError, ValueError):
            text = f.read_text().strip()
            sizes.append(int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1:], 0))
    return max(sizes, default=0)


def _free_bytes(device: str) -> int:
    """Memory the pool may use: the GPU's free memory, or the host's MemAvailable (Linux); elsewhere 1 GB."""
    import torch

    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return 1 << 30


def deviation(out, ref):
    """The largest |out - ref| of each output the timed step returned (a forward: the first outputs), NaN
    scored as compare scores it, as one tensor left on the device (no sync inside the timing loop); an
    output that cannot be compared scores 0 and keeps its place. None where nothing can be compared."""
    import torch

    outs, refs = as_tuple(out), as_tuple(ref)
    if len(outs) > len(refs) or not any(isinstance(o, torch.Tensor) for o in outs):
        return None
    errors = []
    for o, r in zip(outs, refs):
        if not isinstance(o, torch.Tensor) or o.shape != r.shape or not o.numel():
            errors.append(torch.zeros((), dtype=torch.float64, device=r.device))
            continue
        o64, r64 = o.detach().double(), r.to(o.device).double()
        err = torch.where(o64.isnan() & r64.isnan(), 0.0, (o64 - r64).abs())
        errors.append(torch.where(o64.isnan() != r64.isnan(), float("inf"), err).max())
    return torch.stack([e.to(errors[0].device) for e in errors])


class TimedOutputs:
    """Every timed call's output against the reference of its own input, kept on the device during the timing
    (no sync inside the loop) and judged after it: a result cached from another call, or work still running
    when the output was read, fails. Before every timed call (change), untimed, a few elements of that input's
    data take new values at places drawn anew, and its reference follows: a result kept by pointer, by size or
    by a sample of the values is stale on every call."""

    CHANGED = 8  # elements changed before each call

    def __init__(self, spec, pool: list, dtype, seed: int, alive=lambda: None, maths: dict | None = None):
        import torch

        self.spec, self.pool, self.names, self.maths = spec, pool, spec.outputs, maths or {}  # variant -> "tf32"
        tols = {m: as_tuple(specs.tolerance_for(spec, pool[0], dtype, m)[0]) for m in {"", *self.maths.values()}}
        self.ref = spec.reference(*pool[0])  # the copies' contents are the same until they change
        alive()
        self.expected = [(self.ref, tols) for _ in pool]
        self.data = data.data_index(pool[0])
        self.gen = torch.Generator().manual_seed(seed + 7)
        self.undo: dict = {}  # input k -> (places, their first values): each change starts from the copy
        self.seen: dict = {}  # (variant, step) -> [(input k, deviation)]

    def change(self, k: int) -> None:
        """timing.bench's `before`: input k back as it was made, then new values (taken from other places of
        the same data, plus one where that is no change) at CHANGED places drawn anew, and its reference
        brought up to date: by the spec's update where it has one (a family linear in its data), else
        computed again. The changes never add up: the data stays the data the tolerance was computed on."""
        import torch

        if self.data is None or not self.pool[k][self.data].is_contiguous():
            return
        inputs = self.pool[k]
        flat = inputs[self.data].view(-1)
        if k in self.undo:
            flat[self.undo[k][0]] = self.undo[k][1]
        picks = torch.randint(flat.numel(), (2, self.CHANGED), generator=self.gen).to(flat.device)
        where = picks[0].unique()
        old, new = flat[where], flat[picks[1][:len(where)]]
        new = torch.where(new == old, new + 1, new)
        flat[where] = new
        self.undo[k] = where, old
        ref = self.spec.update(self.ref, where, old, new, *inputs) if self.spec.update else self.spec.reference(*inputs)
        self.expected[k] = ref, self.expected[k][1]

    def observe(self, key: tuple, k: int, out) -> None:
        """timing.bench's observer: key is (kind, name, step); only variants are judged."""
        if key[0] == "variant":
            self.seen.setdefault(key[1:], []).append((k, deviation(out, self.expected[k][0])))

    def findings(self, variant: str, timings: dict) -> list[str]:
        for label in timings:
            for k, dev in self.seen.get((variant, label), []):
                if dev is None:
                    continue
                tols = self.expected[k][1][self.maths.get(variant, "")]
                tols = tols * len(dev) if len(tols) == 1 else tols[:len(dev)]
                for i, (e, t) in enumerate(zip(dev.cpu().tolist(), tols)):
                    if not e <= t:  # NaN fails too
                        name = self.names[i] if i < len(self.names) else f"output {i}"
                        return [f"timing: {label} on timed input {k + 1}: {name} off by {e:.3g} (tolerance {t:.3g}): "
                                "a result kept from another call?"]
        return []


def unseen_work(timings) -> list[str]:
    """The tail: how long a device-wide sync still waited after the end event on PyTorch's stream had fired.
    An honest call's tail is what the sync itself costs (an empty call's, measured in the same run) plus
    jitter; work the events did not wait for, on another stream, adds its time."""
    for label, t in timings.items():
        if t.tail_s is None or t.tail_floor_s is None:
            continue
        allowed = 2 * t.tail_floor_s + 0.1 * t.median_s + 5e-6
        if t.tail_s > allowed:
            return [f"timing: {label}: a device-wide sync waited {t.tail_s * 1e6:,.0f} us after the events on "
                    f"PyTorch's stream had ended (allowed {allowed * 1e6:,.0f} us): work on another stream?"]
    return []


# A kernel on the tensor cores may beat the CUDA cores' FLOP peak (device.py's figure) by their dense ratio,
# by compute capability's major: on Ampere (8) and Hopper (9) about 8x in float32 (as TF32) and 2x in float64,
# on Volta and Turing (7) none in either.
# A rate above that is no kernel's. Where the ratio is not known (Blackwell's TF32 is about 15x), no guard.
TENSOR_CORES = {7: {"float32": 1.0, "float64": 1.0},
                8: {"float32": 8.0, "float64": 2.0}, 9: {"float32": 8.0, "float64": 2.0}}


def impossible(v, peak, major: int | None, dtype: str) -> list[str]:
    """On a GPU (its device.Peaks, its compute capability's major), a bandwidth above the memory's peak, or a
    FLOP rate above the compute ceiling, is an error in the timing, not a speedup."""
    if not peak:
        return []
    found = []
    if v.gbps and v.gbps > peak.bandwidth_gbps:
        found.append(f"timing: {v.gbps:,.0f} GB/s is above this GPU's peak of {peak.bandwidth_gbps:,.0f} GB/s: "
                     "the timer missed the work")
    ratio = TENSOR_CORES.get(major, {}).get(dtype)
    ceiling = peak.flops(dtype) and ratio and peak.flops(dtype) * ratio
    if v.gflops and ceiling and v.gflops > ceiling:
        found.append(f"timing: {v.gflops:,.0f} GFLOP/s is above this GPU's {dtype} ceiling of {ceiling:,.0f} "
                     "GFLOP/s (tensor cores included): the timer missed the work")
    return found
