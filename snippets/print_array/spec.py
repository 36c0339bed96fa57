"""print_array: what the kernel prints, parsed back, must equal the tensor."""

import torch


def make_inputs(sizes, dtype, device, gen):
    if "values" in sizes:  # kplay checked that the dtype holds every value
        return (torch.tensor(sizes["values"], dtype=dtype, device=device),)
    n = sizes["n"]
    if dtype.is_floating_point:  # every digit matters, at magnitudes from 1e-8 to 1e8: %f or %.6g loses some
        scale = 10.0 ** torch.randint(-8, 9, (n,), generator=gen)
        x = (torch.randn(n, generator=gen, dtype=torch.float64) * scale).to(dtype)
    else:  # the whole range, its ends first and last: "%d" of an int64 beyond 2^31 prints something else
        info = torch.iinfo(dtype)
        x = torch.randint(info.min, info.max, (n,), generator=gen, dtype=dtype)
        x[0], x[-1] = info.min, info.max
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
    """The printed lines, one number each, in order, as a tensor like x."""
    lines = text.splitlines()
    lines = lines[:-1] if lines and not lines[-1].strip() else lines  # the last line's newline
    for k, line in enumerate(lines, 1):
        if len(line.split()) != 1:
            raise AssertionError(f"line {k} is {line[:40]!r}: print one number per line")
    try:
        values = [float(v) if x.dtype.is_floating_point else int(v) for v in lines]
    except ValueError:
        raise AssertionError(f"printed {lines[:4]}…, not one number per line") from None
    if len(values) != x.numel():
        raise AssertionError(f"printed {len(values)} values, expected {x.numel()}: one line per element")
    return torch.tensor(values, dtype=x.dtype)
