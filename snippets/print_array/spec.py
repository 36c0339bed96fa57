"""print_array: what the kernel prints, parsed back, must equal the tensor."""

import torch


def make_inputs(sizes, dtype, device, gen):
    if "values" in sizes:  # kplay checked that the dtype holds every value
        return (torch.tensor(sizes["values"], dtype=dtype, device=device),)
    if dtype.is_floating_point:
        x = torch.randn(sizes["n"], generator=gen, dtype=dtype)
    else:
        x = torch.randint(-1000, 1000, (sizes["n"],), generator=gen, dtype=dtype)
    return (x.to(device),)


def reference(x):
    return x.cpu()


def tolerance(x, dtype):
    if not dtype.is_floating_point:
        return 0.0, "exact: an integer prints exactly"
    digits = {torch.float32: "%.9g", torch.float64: "%.17g"}.get(dtype, "its digits")
    return 0.0, f"exact: {digits} round-trips {str(dtype).removeprefix('torch.')}"


def call(ops, variant, x):
    ops.print_array(x)


def traffic(sizes, dtype):
    return sizes["n"] * torch.tensor([], dtype=dtype).element_size()  # each element read once


def flops(sizes):
    return 0  # it only prints


def from_stdout(text, x):
    """The printed lines as a tensor like x (None where a line does not parse)."""
    lines = text.split()
    try:
        values = [float(v) if x.dtype.is_floating_point else int(v) for v in lines]
    except ValueError:
        raise AssertionError(f"printed {lines[:4]}…, not one number per line") from None
    if len(values) != x.numel():
        raise AssertionError(f"printed {len(values)} values, expected {x.numel()}: one line per element")
    return torch.tensor(values, dtype=x.dtype)
