"""lltm: the cell of PyTorch's C++/CUDA extension tutorial; a check covers new_h, new_cell and all five gradients."""

import functools
import math

import torch
import torch.nn.functional as F


def lltm_reference(input, weights, bias, old_h, old_cell):
    """The tutorial's Python LLTM: no forget gate, an ELU candidate cell; autograd does the backward."""
    X = torch.cat([old_h, input], dim=1)
    gate_weights = F.linear(X, weights, bias)
    gates = gate_weights.chunk(3, dim=1)
    input_gate = torch.sigmoid(gates[0])
    output_gate = torch.sigmoid(gates[1])
    candidate_cell = F.elu(gates[2])
    new_cell = old_cell + candidate_cell * input_gate
    new_h = torch.tanh(new_cell) * output_gate
    return new_h, new_cell


def lltm_function(ops, variant):
    """The variant as a function (input, weights, bias, old_h, old_cell) -> (new_h, new_cell).

    cuda-fast's and cuda-graph's op `lltm` has its autograd in C++; cpp and cuda have lltm_forward and
    lltm_backward, and their autograd is the tutorial's LLTMFunction, in Python (python_autograd).
    """
    register_fakes(ops)
    if variant in ("cuda-fast", "cuda-graph"):
        return ops.lltm.default  # the one overload: no overload resolution per call
    return python_autograd(ops)


_wired: dict[str, object] = {}


def python_autograd(ops):
    """The tutorial's LLTMFunction: a build's lltm_forward, with its lltm_backward as the gradient (once per
    build). A plain autograd.Function costs less per call than torch.library.register_autograd's wrapper
    (on the 2-core box 91 against 108 us forward), and a cell is mostly its call's overhead."""
    name = ops.lltm_forward.default.name()
    if name not in _wired:
        forward_op, backward_op = ops.lltm_forward.default, ops.lltm_backward.default

        class LLTMFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, input, weights, bias, old_h, old_cell):
                new_h, new_cell, gates, X = forward_op(input, weights, bias, old_h, old_cell)
                ctx.save_for_backward(new_cell, gates, X, weights)
                return new_h, new_cell

            @staticmethod
            def backward(ctx, grad_h, grad_cell):
                new_cell, gates, X, weights = ctx.saved_tensors
                zero = new_cell.new_zeros(()).expand_as(new_cell)  # an output the loss did not use
                grad_h, grad_cell = (zero if g is None else g for g in (grad_h, grad_cell))
                return backward_op(grad_h, grad_cell, new_cell, gates, X, weights)

        _wired[name] = LLTMFunction.apply
    return _wired[name]


class LLTM(torch.nn.Module):
    """The tutorial's module; `function` picks the implementation (lltm_function)."""

    def __init__(self, input_features, state_size, function=lltm_reference):
        super().__init__()
        self.function = function
        self.weights = torch.nn.Parameter(torch.empty(3 * state_size, input_features + state_size))
        self.bias = torch.nn.Parameter(torch.empty(3 * state_size))
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.bias.numel() // 3)
        for weight in self.parameters():
            weight.data.uniform_(-stdv, +stdv)

    def forward(self, input, state):
        old_h, old_cell = state
        return self.function(input, self.weights, self.bias, old_h, old_cell)


_faked: set[str] = set()


def register_fakes(ops):
    """Shapes of lltm_forward / lltm_backward without running them (torch.compile, opcheck); every build
    has both ops (cuda-fast's `lltm` calls them, so it needs no fake of its own)."""
    ns = ops.name
    if ns in _faked:
        return
    _faked.add(ns)

    @torch.library.register_fake(f"{ns}::lltm_forward")
    def _forward(input, weights, bias, old_h, old_cell):
        (batch, state), features = old_h.shape, input.shape[1]
        return (old_h.new_empty(batch, state), old_h.new_empty(batch, state), old_h.new_empty(batch, 3 * state),
                old_h.new_empty(batch, state + features))

    @torch.library.register_fake(f"{ns}::lltm_backward")
    def _backward(grad_h, grad_cell, new_cell, gates, X, weights):
        (batch, state), features = new_cell.shape, X.shape[1] - new_cell.shape[1]
        d_old_h = X.new_empty(X.shape)[:, :state]  # a view of d_X, as in the real op; d_input is a copy
        return (X.new_empty(batch, features), weights.new_empty(weights.shape), gates.new_empty(gates.shape[1]),
                d_old_h, new_cell.new_empty(new_cell.shape))


# ---- the engine's hooks -------------------------------------------------------------------------------


def make_inputs(sizes, dtype, device, gen):
    """The five inputs, then the upstream gradients of new_h and new_cell (the check's backward)."""
    batch, features, state = sizes["batch"], sizes["features"], sizes["state"]
    stdv = 1.0 / math.sqrt(state)  # the tutorial's reset_parameters

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype).to(device)

    def uniform(*shape):
        return (torch.rand(*shape, generator=gen, dtype=dtype) * 2 * stdv - stdv).to(device)

    return (randn(batch, features), uniform(3 * state, state + features), uniform(3 * state),
            randn(batch, state), randn(batch, state), randn(batch, state), randn(batch, state))


def forward_backward(fn, input, weights, bias, old_h, old_cell, grad_h, grad_cell):
    """(new_h, new_cell, d_input, d_weights, d_bias, d_old_h, d_old_cell) of fn, by autograd."""
    leaves = [x.detach().clone().requires_grad_() for x in (input, weights, bias, old_h, old_cell)]
    new_h, new_cell = fn(*leaves)
    grads = torch.autograd.grad((new_h, new_cell), leaves, (grad_h, grad_cell))
    return (new_h.detach(), new_cell.detach(), *grads)


def reference(*inputs):
    return forward_backward(lltm_reference, *(x.double() for x in inputs))


def call(ops, variant, *inputs):
    return forward_backward(lltm_function(ops, variant), *inputs)


LAMBDA = 5  # standard deviations: each product's rounding error stays under it with probability ~1 - 6e-7


def product_error(a, b, exact):
    """Per element of a @ b.T (k terms, exact: its value): LAMBDA standard deviations of its rounding error.
    Each addition rounds its partial sum s by at most u, independently (Higham and Mary 2019): the error's
    variance is u²/3·Σs², and Σs² is at most k·(Σt² + (Σt)²) over the terms t, in any order of adding."""
    return LAMBDA * math.sqrt(a.shape[1] / 3) * ((a * a) @ (b * b).T + exact * exact).sqrt()


def tolerance(input, weights, bias, old_h, old_cell, grad_h, grad_cell, dtype):
    """Per output, the largest of its elements' error bounds (in units of u, the dtype's rounding): each
    product's rounding (product_error), carried through the gates' slopes element by element, plus a few
    roundings of each step's result. In float64 the reference errs as much: twice that."""
    u = torch.finfo(dtype).eps / 2
    batch, state = old_h.shape
    X, W, b = torch.cat([old_h, input], 1).double(), weights.double(), bias.double()
    ones = torch.ones(batch, 1, dtype=torch.float64, device=X.device)
    z = X @ W.T + b
    e_z = u * product_error(torch.cat([X, ones], 1), torch.cat([W, b[:, None]], 1), z)
    zi, zo, zc = z.split(state, 1)
    ei, eo, ec = e_z.split(state, 1)
    i, o, c = torch.sigmoid(zi), torch.sigmoid(zo), F.elu(zc)
    si, so, sc = i * (1 - i), o * (1 - o), torch.where(zc > 0, 1.0, c + 1)  # the slopes
    e_i, e_o, e_c = si * ei + 2 * u * i, so * eo + 2 * u * o, sc * ec + 2 * u * c.abs()
    new_cell = old_cell.double() + c * i
    t = torch.tanh(new_cell)
    e_cell = i * e_c + c.abs() * e_i + 2 * u * (c * i).abs() + u * new_cell.abs()
    e_t = (1 - t * t) * e_cell + 2 * u * t.abs()
    e_h = o * e_t + t.abs() * e_o + u * (t * o).abs()
    # The backward: d_gates from the forward's values, each with its error from theirs (a slope's own slope:
    # sigmoid's |1 - 2s|, elu's c + 1 below 0, tanh's 2|t|), then the three products over d_gates.
    gh, gc = grad_h.double(), grad_cell.double()
    d_cell = gc + gh * o * (1 - t * t)
    e_dcell = gh.abs() * ((1 - t * t) * e_o + 2 * (o * t).abs() * e_t) + 3 * u * d_cell.abs()
    d_gates = torch.cat([d_cell * c * si, gh * t * so, d_cell * i * sc], 1)
    e_gates = torch.cat([
        (c * si).abs() * e_dcell + (d_cell * si).abs() * e_c + (d_cell * c * si * (1 - 2 * i)).abs() * ei,
        (gh * so).abs() * e_t + (gh * t * so * (1 - 2 * o)).abs() * eo,
        (i * sc).abs() * e_dcell + (d_cell * sc).abs() * e_i
        + (d_cell * i * torch.where(zc > 0, 0.0, c + 1)).abs() * ec,
    ], 1) + 4 * u * d_gates.abs()
    # In a product over d_gates, their errors (from independent roundings) add like the rounding errors do.
    d_w, d_x = d_gates.T @ X, d_gates @ W
    e_w = u * product_error(d_gates.T, X.T, d_w) + ((e_gates * e_gates).T @ (X * X)).sqrt()
    e_x = u * product_error(d_gates, W.T, d_x) + ((e_gates * e_gates) @ (W * W)).sqrt()
    e_b = u * product_error(d_gates.T, ones.T, d_gates.sum(0, keepdim=True).T) + (e_gates * e_gates).sum(0).sqrt()
    twice = 2 if dtype == torch.float64 else 1
    tols = tuple(twice * e.max().item() if e.numel() else 0.0
                 for e in (e_h, e_cell, e_x[:, state:], e_w, e_b, e_x[:, :state], e_dcell))
    return tols, f"per element: {LAMBDA}σ of each product's rounding, carried through the gates' slopes"


def output_like(input, weights, bias, old_h, old_cell, grad_h, grad_cell):
    """The buffers a forward and backward allocate: X, gates, new_h, new_cell, d_gates, d_weights, d_X."""
    (batch, state), X = old_h.shape, torch.cat([old_h, input], 1)
    gates = X.new_empty(batch, 3 * state)
    return (X, gates, old_h, old_cell, gates, weights, X)


def flops(sizes):
    """The three matmuls of the forward and backward (2·batch·3·state·(state+features) each)."""
    return 3 * 2 * sizes["batch"] * 3 * sizes["state"] * (sizes["state"] + sizes["features"])


def traffic(sizes, dtype):
    """Forward + backward, each tensor counted once where a step reads it and once where it writes it
    (the ops' own intermediates, such as d_gates, are not counted): a floor, simple to check by hand."""
    batch, features, state = sizes["batch"], sizes["features"], sizes["state"]
    x_cols = state + features  # X = [old_h, input]
    weights, gates = 3 * state * x_cols, batch * 3 * state
    forward = (batch * features + weights + 3 * state + 2 * batch * state  # read input, W, b, old_h, old_cell
               + 2 * batch * state + gates + batch * x_cols)  # write new_h, new_cell, gates, X
    backward = (3 * batch * state + gates + batch * x_cols + weights  # read grad_h, grad_cell, new_cell, gates, X, W
                + batch * features + weights + 3 * state + 2 * batch * state)  # write the five gradients
    return (forward + backward) * torch.tensor([], dtype=dtype).element_size()


# ---- kplay run: forward and backward timed apart, two baselines, a gradcheck column ----


def function(ops, variant):
    """What is timed: the variant's cell, a function of (input, weights, bias, old_h, old_cell)."""
    return lltm_function(ops, variant)


def timings(fn, inputs):
    """{label: (prepare, run)}: the engine times run(*prepare()) alone, as the tutorial's loop does:
    the forward on leaves that require grad (training), and the tutorial's backward,
    (new_h.sum() + new_cell.sum()).backward(), on a fresh forward with the last gradients dropped."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs[:5]]

    def fresh_graph():
        for x in leaves:
            x.grad = None
        return fn(*leaves)

    def backward(new_h, new_cell):
        (new_h.sum() + new_cell.sum()).backward()

    return {"forward": (lambda: leaves, fn), "backward": (fresh_graph, backward)}


def gradcheck(fn, device, seed=0):
    """torch.autograd.gradcheck in float64 on a small cell (batch 3, features 5, state 4)."""
    gen = torch.Generator().manual_seed(seed)
    inputs = make_inputs({"batch": 3, "features": 5, "state": 4}, torch.float64, device, gen)[:5]
    return torch.autograd.gradcheck(fn, [x.requires_grad_() for x in inputs], raise_exception=False)


def extra(ops, variant, inputs):
    """Columns beyond check and time: the float64 gradcheck verdict."""
    ok = gradcheck(lltm_function(ops, variant), inputs[0].device)
    return {"gradcheck": "pass" if ok else "FAIL"}


WALL_CLOCK = True  # tiny ops: kplay also times each call on a synchronized wall clock, as the tutorial did


@functools.cache
def _compiled():
    return torch.compile(lltm_reference, dynamic=False)


def compiled_reference(*inputs):
    """torch.compile (default mode) of the reference, compiled on its first call."""
    return _compiled()(*inputs)


# What every variant is timed against, in the same run (--skip-baseline torch.compile drops the second).
BASELINES = {"eager": lltm_reference, "torch.compile": compiled_reference}
OUTPUTS = ("new_h", "new_cell", "d_input", "d_weights", "d_bias", "d_old_h", "d_old_cell")
