"""linear: y = x W^T + b and its three gradients against F.linear in float64; every variant is an autograd op."""

import math

import torch
import torch.nn.functional as F

from playground.run.check import WrongOutput

# kplay compares float32 arithmetic with float32 arithmetic: TF32 would round cuBLAS's inputs to 10
# mantissa bits and make F.linear both faster and less accurate than the kernels it is timed against.
torch.backends.cuda.matmul.allow_tf32 = False

LAMBDA = 5  # the probabilistic bound below fails with probability about exp(-LAMBDA**2 / 2) per element


def make_inputs(sizes, dtype, device, gen):
    """x, weight, bias, then the upstream gradient of y: random, so a scaled or transposed gradient shows."""
    batch, fan_in, fan_out = sizes["batch"], sizes["in"], sizes["out"]
    bound = 1 / math.sqrt(fan_in)  # torch.nn.Linear's initial range, so outputs stay O(1) at any size
    x = torch.randn(batch, fan_in, generator=gen, dtype=dtype)
    weight = (torch.rand(fan_out, fan_in, generator=gen, dtype=dtype) * 2 - 1) * bound
    bias = (torch.rand(fan_out, generator=gen, dtype=dtype) * 2 - 1) * bound
    grad_out = torch.randn(batch, fan_out, generator=gen, dtype=dtype)
    return x.to(device), weight.to(device), bias.to(device), grad_out.to(device)


def reference(x, weight, bias, grad_out):
    return gradients(F.linear, *(t.double() for t in (x, weight, bias, grad_out)))


def update(ref, where, old, new, x, weight, bias, grad_out):
    """y once x changed at flat places `where` from old to new: y is linear in x, so each change adds its
    column of W to its row. The timing compares y alone (the gradients are not timed outputs)."""
    rows, cols = where // x.shape[1], where % x.shape[1]
    return (ref[0].index_add(0, rows, (new - old).double()[:, None] * weight[:, cols].double().T),)


TF32_ROUNDOFF = 2.0**-11  # TF32 keeps 10 mantissa bits: rounding to nearest errs by at most 2^-11, relative
HALF = (torch.bfloat16, torch.float16)  # half-precision inputs, float32 sums (ATen, cuBLAS), the output rounded once


def product_tolerance(a, b, dtype, extra=None, tf32=False):
    """The largest of the elements' error bounds of a b^T (k along dim 1), plus a vector added.

    Each addition rounds its partial sum s by at most u = eps/2, independently (Higham and Mary 2019): an
    element's error has variance u^2/3 * sum s^2, and sum s^2 <= k (sum t^2 + (sum t)^2) over its terms t, in
    any order of adding. Each element's bound is LAMBDA standard deviations of that; the float64 reference's
    own u is added (in a float64 run it errs as much as the kernel).

    tf32: the inputs were rounded to TF32 first. Term i becomes t_i (1 + d_i + e_i) with |d_i|, |e_i| <= u_t
    (TF32_ROUNDOFF), independent: the element errs by about LAMBDA * sqrt(2) * u_t * sqrt(sum t^2) more.
    """
    if not a.numel() or not b.numel():
        return 0.0
    half = dtype in HALF  # its products are exact in float32, its sums float32's, and the output rounds once
    u = (torch.finfo(torch.float32 if half else dtype).eps + torch.finfo(torch.float64).eps) / 2
    for precise in (torch.float32, torch.float64):  # a bound needs no float64, unless float32 overflows
        a_, b_ = a.to(precise), b.to(precise)
        exact, squares = a_ @ b_.T, (a_ * a_) @ (b_ * b_).T
        if extra is not None:
            e = extra.to(precise)
            exact, squares = exact + e, squares + e * e
        if torch.isfinite(squares).all():
            break
    k = a.shape[1] + (extra is not None)
    bound = LAMBDA * u * (k / 3 * (squares.double() + exact.double() ** 2)).sqrt()
    if tf32:
        bound += LAMBDA * math.sqrt(2) * TF32_ROUNDOFF * squares.double().sqrt()
    if half:  # the output rounded to the dtype once, to nearest or not: within one ulp, relative
        bound += torch.finfo(dtype).eps * exact.double().abs()
    return bound.max().item()


def tolerance(x, weight, bias, grad_out, dtype, math=""):
    """One bound per output (OUTPUTS), each from the product that makes it; math="tf32": a variant whose
    float32 products round their inputs to TF32 (cuda-tensor-core)."""
    tf32 = math == "tf32" and dtype == torch.float32
    source = f"per element: {LAMBDA}σ of each product's rounding, u·√(k/3·(Σt² + (Σt)²))"
    if dtype in HALF:
        source += f", u of float32's sums, + one ulp of the output in {str(dtype).removeprefix('torch.')}"
    if tf32:
        source += f", + {LAMBDA}·√2·2^-11·√Σt²: inputs rounded to TF32"
    return gradient_tolerances(x, weight, bias, grad_out, dtype, tf32), source


OUTPUTS = ("y", "grad_input", "grad_weight", "grad_bias")


def checked_gradients(grads, x, weight):
    """linear_backward's result as the three gradients autograd takes, or a failed check in the kernel's terms.

    Autograd would reject a wrong count or shape too, but in its own terms ("returned an incorrect
    number of gradients"); the post's `return a, b, c;` is a one-tensor return, and this says so.
    """
    grads = (grads,) if isinstance(grads, torch.Tensor) else tuple(grads)
    needs = {"grad_input": ("x", x.shape), "grad_weight": ("weight", weight.shape),
             "grad_bias": ("bias", weight.shape[:1])}
    if len(grads) != len(needs):
        raise WrongOutput(f"linear_backward returns {len(grads)} tensor{'s' if len(grads) != 1 else ''}; "
                           f"the backward needs {len(needs)} ({', '.join(needs)})")
    for g, (name, (of, shape)) in zip(grads, needs.items()):
        if not isinstance(g, torch.Tensor) or g.shape != shape:
            got = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
            raise WrongOutput(f"linear_backward's {name} has shape {got}; it must be shaped like {of}, {tuple(shape)}")
    return grads


_wired: dict[str, object] = {}


def autograd_op(ops):
    """The forward op of a build, with linear_backward registered as its gradient (once per build)."""
    forward = ops.linear_forward.default
    name = forward.name()
    if name not in _wired:
        backward_op = ops.linear_backward.default

        def setup_context(ctx, inputs, output):
            x, weight, _ = inputs
            ctx.save_for_backward(x, weight)

        def backward(ctx, grad_out):
            x, weight = ctx.saved_tensors
            return checked_gradients(backward_op(grad_out.contiguous(), x, weight), x, weight)

        torch.library.register_autograd(name, backward, setup_context=setup_context)
        _wired[name] = forward
    return _wired[name]


def linear(ops, x, weight, bias):
    """y = x W^T + b through a build's ops; differentiable in x, weight and bias."""
    return autograd_op(ops)(x, weight, bias)


class Linear(torch.nn.Linear):
    """torch.nn.Linear whose forward (and backward) run a kplay-built op; x may have leading dims."""

    def __init__(self, ops, in_features, out_features, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=True, device=device, dtype=dtype)
        self.ops = ops

    def forward(self, x):
        y = linear(self.ops, x.reshape(-1, self.in_features), self.weight, self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)


def call(ops, variant, x, weight, bias, grad_out):
    """y and the three gradients, through the op's autograd wiring: what a training step would run."""
    return gradients(lambda *a: linear(ops, *a), x, weight, bias, grad_out)


def function(ops, variant):
    """What is timed: the forward alone, as the baseline F.linear is; the check covers the backward."""
    return lambda x, weight, bias, grad_out: linear(ops, x, weight, bias)


BASELINE = "F.linear"


def baseline(x, weight, bias, grad_out):
    return F.linear(x, weight, bias)


def flops(sizes):
    return 2 * sizes["batch"] * sizes["in"] * sizes["out"]  # the timed forward: one FMA per (row, in, out)


def traffic(sizes, dtype):
    """The timed forward's minimal traffic: x, W and b read once, y written once."""
    batch, fan_in, fan_out = sizes["batch"], sizes["in"], sizes["out"]
    elements = batch * fan_in + fan_out * fan_in + fan_out + batch * fan_out
    return elements * torch.tensor([], dtype=dtype).element_size()


def output_like(x, weight, bias, grad_out):
    """What call allocates: y, then the gradients, each shaped like its input."""
    return (torch.empty_like(grad_out), torch.empty_like(x), torch.empty_like(weight), torch.empty_like(bias))


def gradients(fn, x, weight, bias, grad_out):
    """(y, grad_x, grad_weight, grad_bias) of fn(x, weight, bias) for the upstream gradient grad_out."""
    # Aliases, not copies: nothing is allocated before the outputs, and a kernel writing its input shows.
    leaves = [t.detach().requires_grad_(True) for t in (x, weight, bias)]
    y = fn(*leaves)
    return (y.detach(), *torch.autograd.grad(y, leaves, grad_out, allow_unused=True))  # None: no gradient


def gradient_tolerances(x, weight, bias, grad_out, dtype, tf32=False):
    """Bounds for y, grad_x = gy W, grad_weight = gy^T x and grad_bias = column sums of gy (tf32: the three
    products through the kernel round their inputs to TF32; the column sums are torch's, in float32)."""
    gy = grad_out
    return (
        product_tolerance(x, weight, dtype, extra=bias, tf32=tf32),
        product_tolerance(gy, weight.t(), dtype, tf32=tf32),
        product_tolerance(gy.t(), x.t(), dtype, tf32=tf32),
        product_tolerance(gy.t(), torch.ones(1, gy.shape[0], dtype=dtype, device=gy.device), dtype),
    )
