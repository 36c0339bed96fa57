"""sum: the answer is the float64 sum; the tolerance is a probabilistic bound of blocked summation."""

import math

import torch


def make_inputs(sizes, dtype, device, gen):
    x = torch.randn(sizes["n"], generator=gen, dtype=dtype)
    return (x.to(device),)


def reference(x):
    return sum64(x)


def update(ref, where, old, new, x):
    """The sum once x changed at `where` from old to new: linear in x, so the change's own sum is added."""
    return ref + (new.double() - old.double()).sum()


def sum64(x, each=lambda c: c):
    """Σ each(x) in float64, a million elements at a time: each piece converted to float64, then summed by
    torch's cascade. Without a float64 copy of x, and 3-6x faster than torch.sum(x, dtype=torch.float64),
    which converts one element at a time."""
    return torch.stack([each(c.double()).sum() for c in x.reshape(-1).split(1 << 20)]).sum()


# What counts as a correct sum (the error model): runs of at most BLOCK elements, each added in order into one
# accumulator of the input's dtype, combined by any tree (pairwise, blocked, lanes, a warp's shuffles, a grid's
# partials), as torch.sum and every rung do. A plain loop over all n in one float32 accumulator does not count:
# its error grows with n, not with log n, and at n = 1e7 it is over this tolerance.
BLOCK = 4096
LAMBDA = 6  # standard deviations: a correct sum fails with probability about 2e-9


def tolerance(x, dtype):
    """A probabilistic bound (rounding errors as independent random variables, Higham and Mary 2019): each
    addition rounds its partial sum s by at most u = eps/2, so the error's variance is u^2/3 times the sum of
    s^2 over the additions. For data of mean m and variance v (from x), runs of b = min(BLOCK, n) in order
    then a tree give sum s^2 about n (m^2 (b^2/3 + 2n) + v (b/2 + log2 n)); the float64 reference's own
    error is added the same way."""
    n = x.numel()
    if n == 0:
        return 0.0, "exact (no elements)"
    flat = x.reshape(-1)
    # in x's dtype: a bound needs no more (a norm, not torch.dot: cuBLAS counts in 32 bits, to 2^31 - 1 elements)
    total, squares = flat.sum().item(), torch.linalg.vector_norm(flat).item() ** 2
    if not math.isfinite(squares):  # float32 overflows past about 1e19 per element
        total, squares = sum64(x).item(), sum64(x, torch.square).item()
    mean = total / n
    var = max(squares / n - mean * mean, 0.0)
    b = min(BLOCK, n)
    squares = n * (mean * mean * (b * b / 3 + 2 * n) + var * (b / 2 + math.log2(n) + 1))
    u = (torch.finfo(dtype).eps + torch.finfo(torch.float64).eps) / 2
    return LAMBDA * u * math.sqrt(squares / 3), f"{LAMBDA}σ rounding bound: runs of ≤ {BLOCK:,} in order, then any tree"


def probe(inputs, dtype, gen):
    """x with 10,000 elements raised (the first and the last among them) and one spike at a random place: a
    kernel that skips part of x fails, whether or not it scales the rest up; an honest one sees everything.
    The tolerance stays the rounding bound, computed on this input."""
    (x,) = inputs
    n = x.numel()
    count = min(n, 10_000)
    # 10,000 distinct places: a permutation up to 1e6; above, random draws (a permutation costs 0.5 s at 1e7,
    # minutes at 1e9)
    if n <= 10**6:
        where = torch.randperm(n, generator=gen)[:count]
    else:
        where = torch.randint(n, (count,), generator=gen).unique()
    where[0], where[-1] = 0, n - 1
    y = x.clone()
    # Skipping 1% of x without scaling up misses about 100 of these raises: about 100 tolerances.
    y[where.to(x.device)] += 100 * tolerance(x, dtype)[0] / math.sqrt(count)
    # Skipping a fraction f >= 0.1% and scaling the rest by 1/(1-f) restores the raises on average; the spike
    # makes it fail for certain. With c = Σ|x| (0.5 n for the uniform data the check probes), the kernel's
    # error is about c(f - [spike skipped])/(1 - f), at least 0.001 c: 500 at n = 1e6, 5e5 at 1e9. The
    # tolerance on y, whose spike dominates its variance, is about 6u·c·√(BLOCK/6), 0.01 of that in float32,
    # and the rescaled background's spread, √(f n) elements of spread 0.29, is 9 at 1e6 (290 at 1e9).
    spike = torch.randint(n, (1,), generator=gen)
    y[spike.to(x.device)] += x.abs().sum().item()
    return (y,)


def call(ops, variant, x):
    return ops.sum(x)  # every variant registers `sum` in its own build's namespace


BASELINE = "torch.sum"


def baseline(x):
    return torch.sum(x)


def traffic(sizes, dtype):
    return sizes["n"] * torch.tensor([], dtype=dtype).element_size()  # read x once; the scalar out is negligible


def flops(sizes):
    return sizes["n"]  # one add per element: far left on the roofline, bound by memory everywhere


def output_like(x):
    return (torch.empty((), dtype=x.dtype, device=x.device),)
