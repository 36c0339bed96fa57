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


LAMBDA = 5  # a k-term sum errs by more than LAMBDA·sqrt(k)·eps·Σ|terms| with probability ~exp(-LAMBDA²/2)


def tolerance(input, weights, bias, old_h, old_cell, grad_h, grad_cell, dtype):
    """Per output: each matmul's rounding (Higham and Mary's probabilistic bound, as in linear), plus the
    gates' error carried through the activations' slopes. Twice that: the float64 reference errs too."""
    eps = torch.finfo(dtype).eps

    def gamma(k):
        return LAMBDA * math.sqrt(k) * eps

    batch, state = old_h.shape
    X = torch.cat([old_h, input], 1).double()
    W, b = weights.double(), bias.double()
    z = X @ W.T + b
    i, o, c = torch.sigmoid(z[:, :state]), torch.sigmoid(z[:, state:2 * state]), F.elu(z[:, 2 * state:])
    new_cell = old_cell.double() + c * i
    t = torch.tanh(new_cell)
    # The gates: state + features + 1 terms. sigmoid, tanh and elu have slopes <= 1, so their error
    # reaches new_cell scaled by at most 1 + |candidate|, and new_h by that plus the output gate's.
    e_z = gamma(X.shape[1] + 1) * (X.abs() @ W.abs().T + b.abs()).max().item()
    e_cell = e_z * (1 + c.abs().max().item()) + 4 * eps * (old_cell.double().abs() + c.abs()).max().item()
    e_h = e_cell + e_z + 4 * eps
    # |d_gates| from magnitudes (no cancellation), and its relative error: each slope's own slope over the
    # slope (sigmoid: |1 - 2s| <= 1, elu: <= 1, tanh: 2|t| <= 2) times the errors above, plus rounding.
    gh, gc = grad_h.double().abs(), grad_cell.double().abs()
    d_cell = gc + gh * o * (1 - t * t)
    d_gates = torch.cat([d_cell * c.abs() * i * (1 - i), gh * t.abs() * o * (1 - o),
                         d_cell * i * torch.where(c > 0, 1.0, c + 1)], 1)
    # In a matmul over d_gates these errors add like the rounding errors: LAMBDA·sqrt(Σ(rho·terms)²).
    rho = 3 * e_z + 2 * e_cell + 16 * eps
    e_weights = (gamma(batch) * (d_gates.T @ X.abs()) + LAMBDA * rho * (d_gates.T ** 2 @ X ** 2).sqrt()).max().item()
    e_x = (gamma(3 * state) * (d_gates @ W.abs()) + LAMBDA * rho * (d_gates ** 2 @ W ** 2).sqrt()).max().item()
    e_bias = (gamma(batch) * d_gates.sum(0) + LAMBDA * rho * d_gates.pow(2).sum(0).sqrt()).max().item()
    e_old_cell = rho * d_cell.max().item()
    tols = (e_h, e_cell, e_x, e_weights, e_bias, e_x, e_old_cell)
    return tuple(2 * t for t in tols), (f"2·({LAMBDA}·sqrt(k)·eps·Σ|terms| per matmul "
                                         "+ gate error through the slopes)")


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
