"""What a check's inputs are: sizes and distributions drawn from the run's seed, which a kernel cannot list or
recognise. A family declares its data in task.toml (`distributions`, a size's `draw` range); the engine draws.

No torch at import: the registry checks the names before torch loads.
"""

from __future__ import annotations

import math
import random

# name -> (what it is, its mean is not zero). A family's first is its main input's; the test sizes take them all.
DISTRIBUTIONS = {
    "randn": ("normal, mean 0, standard deviation 1", False),
    "uniform": ("uniform in [0, 1)", True),
    "randn+3": ("normal, mean 3, standard deviation 1", True),
    "ones": ("every element 1", True),
    "integers": ("whole numbers from -8 to 8, as floats", False),
    "magnitudes": ("±10^u with u uniform in [-3, 3]: magnitudes from 1e-3 to 1e3, random signs", False),
}
SMALL = (2, 65_537)  # the range a size's two small draws come from, where its family declares none
SMALL_DRAWS = 2  # and one more within the requested size's decade


def draw(name: str, shape, dtype, gen):
    """A tensor of `shape` from the named distribution (CPU, seeded by the torch.Generator gen)."""
    import torch

    if name == "randn":
        return torch.randn(shape, generator=gen, dtype=dtype)
    if name == "uniform":
        return torch.rand(shape, generator=gen, dtype=dtype)
    if name == "randn+3":
        return torch.randn(shape, generator=gen, dtype=dtype).add_(3)
    if name == "ones":
        return torch.ones(shape, dtype=dtype)
    if name == "integers":
        return torch.randint(-8, 9, shape, generator=gen).to(dtype)
    if name == "magnitudes":
        signs = torch.randint(0, 2, shape, generator=gen).to(dtype).mul_(2).sub_(1)
        exponents = torch.rand(shape, generator=gen, dtype=torch.float64).mul_(6).sub_(3)
        return torch.pow(10.0, exponents).to(dtype).mul_(signs)
    raise ValueError(f"unknown distribution '{name}'; known: {', '.join(DISTRIBUTIONS)}")


def data_index(inputs) -> int | None:
    """Which input is the data a distribution fills: the first floating-point tensor (sum's x, linear's x,
    lltm's input); the others (weights, a bias, a gradient) are as spec.py makes them."""
    import torch

    return next((k for k, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()
                 and x.numel()), None)


def with_distribution(inputs: tuple, name: str, gen) -> tuple:
    """The inputs with the data's values drawn from `name` (same shape, dtype and device)."""
    k = data_index(inputs)
    if k is None:
        return inputs
    x = inputs[k]
    values = draw(name, tuple(x.shape), x.dtype, gen).to(x.device)
    return (*inputs[:k], values, *inputs[k + 1:])


def nonzero_mean(names) -> str | None:
    """The first of the names whose distribution's mean is not zero (the probe's), or None."""
    return next((n for n in names if DISTRIBUTIONS[n][1]), None)


def drawn_sizes(sizes: dict, ranges: dict, seed: int, taken=()) -> list[dict]:
    """Three cases of sizes from the seed, beside the family's fixed ones (`taken`): two with each size in its
    `draw` range (SMALL where none is declared, never above the requested size), one with each size within
    the requested one's decade (a tenth of it up to it). One size: none a multiple of 32; more: each odd.
    None is a case already taken (or the requested size); where a range is too small for that, fewer."""
    rng = random.Random(f"sizes {seed}")
    one = len(sizes) == 1
    seen = [dict(sizes), *map(dict, taken)]

    def pick(lo: int, hi: int) -> int:
        lo, hi = max(1, min(lo, hi)), max(1, hi)
        value = rng.randint(lo, hi)
        if one:  # 32 divides no value beside one it divides
            return value if value % 32 else value - 1 if value - 1 >= lo else value + 1
        odd = value | 1
        return odd if odd <= hi else max(lo, odd - 2)

    def new(bounds) -> dict | None:
        for _ in range(20):
            case = {k: pick(*bounds(k, v)) for k, v in sizes.items()}
            if case not in seen:
                seen.append(case)
                return case
        return None

    small = [new(lambda k, v: _within(ranges.get(k, SMALL), v)) for _ in range(SMALL_DRAWS)]
    return [c for c in [*small, new(lambda k, v: (max(1, math.ceil(v / 10)), v))] if c]


def _within(bounds, requested: int) -> tuple[int, int]:
    lo, hi = bounds
    return lo, min(hi, requested)


def assign(count: int, names, seed: int) -> list[str]:
    """A distribution for each of `count` cases: every one of `names` before any repeats, in an order drawn
    from the seed."""
    rng, out = random.Random(f"distributions {seed}"), []
    while len(out) < count:
        order = list(names)
        rng.shuffle(order)
        out += order
    return out[:count]
