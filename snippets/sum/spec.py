"""sum: the answer is the float64 sum; the tolerance is the tree bound."""

import math

import torch


def make_inputs(sizes, dtype, device, gen):
    x = torch.randn(sizes["n"], generator=gen, dtype=dtype)
    return (x.to(device),)


def reference(x):
    return x.double().sum()


def tolerance(x, dtype):
    # A tree of depth log2(n) rounds each element at most that many times (DESIGN: never relative to
    # |sum|, which cancels on zero-mean data). Sum|x| is computed in float64.
    eps = torch.finfo(dtype).eps
    depth = math.ceil(math.log2(x.numel())) + 1 if x.numel() > 1 else 1
    return depth * eps * x.double().abs().sum().item(), "tree bound (ceil(log2 n)+1)·eps·Σ|x|"


def call(ops, variant, x):
    return ops.sum(x)  # every variant registers `sum` in its own build's namespace


BASELINE = "torch.sum"


def baseline(x):
    return torch.sum(x)


def traffic(sizes, dtype):
    return sizes["n"] * torch.tensor([], dtype=dtype).element_size()


def output_like(x):
    return (torch.empty((), dtype=x.dtype, device=x.device),)
