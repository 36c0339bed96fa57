"""sum: the answer is the float64 sum; the tolerance is the tree bound."""

import math

import torch


def make_inputs(sizes, dtype, device, gen):
    x = torch.randn(sizes["n"], generator=gen, dtype=dtype)
    return (x.to(device),)


def reference(x):
    return sum64(x)


def sum64(x, each=lambda c: c):
    """Σ each(x) in float64, a million elements at a time: each piece converted to float64, then summed by
    torch's cascade. Without a float64 copy of x, and 3-6x faster than torch.sum(x, dtype=torch.float64),
    which converts one element at a time."""
    return torch.stack([each(c.double()).sum() for c in x.reshape(-1).split(1 << 20)]).sum()


def tolerance(x, dtype):
    # A tree of depth log2(n) rounds each element at most that many times (never relative to
    # |sum|, which cancels on zero-mean data); the 0.1% margin covers the rounding of Σ|x| itself.
    eps = torch.finfo(dtype).eps
    depth = math.ceil(math.log2(x.numel())) + 1 if x.numel() > 1 else 1
    l1 = sum64(x, torch.abs).item() * 1.001
    return depth * eps * l1, "tree bound (ceil(log2 n)+1)·eps·Σ|x|"


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
    # Skipping 1% of x without scaling up misses about 100 of these raises: about 50 tolerances.
    y[where.to(x.device)] += 100 * tolerance(x, dtype)[0] / math.sqrt(count)
    # Skipping a fraction f >= 0.1% and scaling the rest by 1/(1-f) restores the raises on average; the spike
    # makes it fail for certain. With c = Σ|x| (about 0.8 n for randn), the kernel's error is about
    # c(f - [spike skipped])/(1 - f), at least 0.001 c = 800 at n = 1e6; the tolerance, (ceil(log2 n)+1)·eps·Σ|y|
    # with Σ|y| about 2c, is 5e-6 c in float32 (7e-6 c at 1e9), and the rescaled background's spread,
    # sqrt(f n) elements of spread 1, is 32 at n = 1e6 (1,000 at 1e9 against 0.001 c = 8e5): 25 sigmas or more.
    spike = torch.randint(n, (1,), generator=gen)
    y[spike.to(x.device)] += sum64(x, torch.abs).item()
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
