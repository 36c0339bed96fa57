"""KERNEL: inputs, the PyTorch reference, the tolerance, and how to call the compiled op."""

import torch


def make_inputs(sizes, dtype, device, gen):
    return (torch.randn(sizes["n"], generator=gen, dtype=dtype).to(device),)


def reference(x):
    return 2 * x.double() + 1


def tolerance(x, dtype):
    # One multiply and one add, each rounded once: 2 ulps of the largest result.
    return 2 * torch.finfo(dtype).eps * (2 * x.double().abs().max().item() + 1), "2 roundings of max|2x+1|"


def call(ops, variant, x):
    return ops.KERNEL(x)


BASELINE = "2 * x + 1"  # its name in the report and in --json


def baseline(x):
    return 2 * x + 1


def traffic(sizes, dtype):
    return 2 * sizes["n"] * torch.tensor([], dtype=dtype).element_size()  # read x, write y


def flops(sizes):
    return 2 * sizes["n"]  # a multiply and an add per element: with traffic, a point on the roofline


def output_like(x):
    return (torch.empty_like(x),)
