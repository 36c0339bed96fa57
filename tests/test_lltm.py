"""LLTM: the cpp, cuda and cuda-fast ops against the Python reference, forward and all five gradients.

The cpp variant runs here; the sources of cuda and cuda-fast only compile here (TORCH_CUDA_ARCH_LIST=9.0)
and run on a GPU.
"""

import re
import shutil

import pytest
import torch

from playground.family import registry, render
from playground.compiler.build import build
from playground.family.spec import module as load_spec

FAMILY = registry.find("lltm")
SPEC = load_spec(FAMILY)
NAMES = ("new_h", "new_cell", "d_input", "d_weights", "d_bias", "d_old_h", "d_old_cell")
# (batch, features, state): the tutorial's size, batch 1, state 1, more than 1024 threads per row, odd
# feature counts, and more than 64 rows (the backward kernel's bias sums then meet in atomicAdd).
SHAPES = [(16, 32, 128), (1, 32, 128), (16, 32, 1), (3, 7, 1025), (5, 1, 31), (65, 33, 33)]
_built: dict = {}


def variant_id(variant: str) -> str:
    """A test id that is not the bare word "cuda": conftest skips tests with that keyword when there is no GPU."""
    return f"variant={variant}"


def ops(variant: str, family=FAMILY, **params):
    """A variant's torch.ops namespace, built once per session (the conftest's cache, which the xdist workers share)."""
    key = (str(family.path), variant, tuple(sorted(params.items())))
    if key not in _built:
        pairs = [f"{k}={v}" for k, v in params.items()]
        _built[key] = build(family, family.variants[variant], family.parse_params(pairs))[0]
    return _built[key]


def inputs(shape, dtype, device, seed=0):
    batch, features, state = shape
    gen = torch.Generator().manual_seed(seed)
    return SPEC.make_inputs({"batch": batch, "features": features, "state": state}, dtype, device, gen)


def assert_matches(fn, xs, dtype):
    """new_h, new_cell and the five gradients of fn against the float64 reference, each within its bound."""
    ref = SPEC.reference(*xs)
    tols, _ = SPEC.tolerance(*xs, dtype)
    out = SPEC.forward_backward(fn, *xs)
    for name, o, r, tol in zip(NAMES, out, ref, tols):
        assert o.shape == r.shape and o.dtype == dtype, name
        err = (o.double() - r).abs().max().item()
        assert err <= tol, f"{name}: max error {err:.3g} > {tol:.3g}"


def strided(xs):
    """The same values in non-contiguous memory: transposed, every other column, an offset view."""
    input, weights, bias, old_h, old_cell, grad_h, grad_cell = xs
    wide = torch.zeros(bias.shape[0], 2, dtype=bias.dtype, device=bias.device)
    wide[:, 1] = bias
    pad = torch.zeros(old_h.shape[0], 2 * old_h.shape[1], dtype=old_h.dtype, device=old_h.device)
    pad[:, ::2] = old_cell
    out = (input.t().contiguous().t(), weights.t().contiguous().t(), wide[:, 1], old_h.t().contiguous().t(), pad[:, ::2],
           grad_h.t().contiguous().t(), grad_cell)
    assert not any(x.is_contiguous() for x in out[:5] if x.numel() > 1 and min(x.shape) > 1)
    return out


# ---- the reference and the checker ----------------------------------------------------------------------


def test_reference_is_the_seed_cell():
    """new_cell = old_cell + elu(z_c) * sigmoid(z_i), new_h = tanh(new_cell) * sigmoid(z_o), X = [old_h, input]."""
    input, weights, bias, old_h, old_cell, *_ = inputs((4, 3, 5), torch.float64, "cpu")
    z = torch.cat([old_h, input], 1) @ weights.T + bias
    zi, zo, zc = z[:, :5], z[:, 5:10], z[:, 10:]
    cand = torch.where(zc > 0, zc, zc.exp() - 1)
    new_cell = old_cell + cand / (1 + (-zi).exp())
    new_h, got_cell = SPEC.lltm_reference(input, weights, bias, old_h, old_cell)
    torch.testing.assert_close(got_cell, new_cell)
    torch.testing.assert_close(new_h, new_cell.tanh() / (1 + (-zo).exp()))


def test_tolerance_is_tight_enough_to_catch_mistakes():
    """Each bound is under 1% of its output's largest value in float32, ~1e-10 in float64: a wrong
    derivative or a missing term errs by O(1) and cannot hide in it."""
    xs = inputs((16, 32, 128), torch.float32, "cpu")
    ref = SPEC.reference(*xs)
    tols, _ = SPEC.tolerance(*xs, torch.float32)
    assert all(0 < t < 1e-2 * r.abs().max().item() for t, r in zip(tols, ref))
    assert max(SPEC.tolerance(*xs, torch.float64)[0]) < 1e-10


# ---- cpp: runs here -------------------------------------------------------------------------------------


def lltm(variant: str, **params):
    """The variant as a differentiable function, as kplay runs it."""
    return SPEC.lltm_function(ops(variant, **params), variant)


@pytest.fixture(scope="module")
def cpp():
    """The cpp variant, built in the set-up of the first test that asks (set-up that waits for the precompiled
    headers is not charged to the test: conftest)."""
    return lltm("cpp")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cpp_matches_reference(cpp, shape, dtype):
    assert_matches(cpp, inputs(shape, dtype, "cpu"), dtype)


def test_cpp_non_contiguous_inputs(cpp):
    xs = strided(inputs((6, 5, 7), torch.float64, "cpu"))
    assert_matches(cpp, xs, torch.float64)


def test_cpp_gradcheck_float64(cpp):
    assert SPEC.gradcheck(cpp, "cpu")


@pytest.mark.usefixtures("cpp")
def test_cpp_opcheck():
    """Schemas, fake tensors and AOT dispatch of both ops."""
    check_ops("cpp", "cpu")


def check_ops(variant, device):
    """opcheck of lltm_forward and lltm_backward (their autograd is an autograd.Function, checked by the
    gradient tests), and of cuda-fast's lltm on leaves that require grad (its autograd is the op's own)."""
    lib = ops(variant)
    SPEC.lltm_function(lib, variant)  # the fakes; for cpp and cuda, the autograd too
    input, weights, bias, old_h, old_cell, grad_h, grad_cell = inputs((4, 5, 6), torch.float64, device)
    leaves = [x.clone().requires_grad_() for x in (input, weights, bias, old_h, old_cell)]
    if variant in ("cuda-fast", "cuda-graph"):  # their autograd is lltm's, in C++: lltm_forward has none
        torch.library.opcheck(lib.lltm.default, leaves)
    leaves = [x.detach() for x in leaves]
    torch.library.opcheck(lib.lltm_forward.default, leaves)
    _, new_cell, gates, X = lib.lltm_forward(input, weights, bias, old_h, old_cell)
    torch.library.opcheck(lib.lltm_backward.default, (grad_h, grad_cell, new_cell, gates, X, weights))


def test_cpp_module_trains_like_the_reference(cpp):
    """The nn.Module wrapper: same outputs and parameter gradients as the Python module with equal weights."""
    torch.manual_seed(0)
    ref = SPEC.LLTM(7, 9).double()
    mine = SPEC.LLTM(7, 9, function=cpp).double()
    mine.load_state_dict(ref.state_dict())
    x, h, c = (torch.randn(4, n, dtype=torch.float64) for n in (7, 9, 9))
    for module in (ref, mine):
        new_h, new_cell = module(x, (h, c))
        (new_h.pow(2).sum() + new_cell.sum()).backward()
    torch.testing.assert_close(mine.weights.grad, ref.weights.grad)
    torch.testing.assert_close(mine.bias.grad, ref.bias.grad)


def grads_of_one_output(fn, xs, which):
    """Gradients of the five inputs when only output `which` (0: new_h, 1: new_cell) reaches the loss."""
    leaves = [x.clone().requires_grad_() for x in xs[:5]]
    return torch.autograd.grad(fn(*leaves)[which].sum(), leaves)


def assert_one_output_used(fn, device, which):
    """Only one output reaches the loss: the other's gradient is undefined and the backward takes it as zero."""
    xs = inputs((3, 4, 5), torch.float64, device)
    for g, w in zip(grads_of_one_output(fn, xs, which), grads_of_one_output(SPEC.lltm_reference, xs, which)):
        torch.testing.assert_close(g, w)


def test_cpp_one_output_used(cpp):
    assert_one_output_used(cpp, "cpu", 0)


def assert_inference_mode(fn, device):
    """Below autograd the op is just the forward."""
    xs = inputs((3, 4, 5), torch.float64, device)[:5]
    with torch.inference_mode():
        new_h, new_cell = fn(*xs)
    ref_h, ref_cell = SPEC.lltm_reference(*xs)
    torch.testing.assert_close(new_h, ref_h)
    torch.testing.assert_close(new_cell, ref_cell)


def test_cpp_inference_mode(cpp):
    assert_inference_mode(cpp, "cpu")


@pytest.mark.usefixtures("cpp")
def test_cpp_rejects_bad_shapes():
    input, weights, bias, old_h, old_cell, *_ = inputs((3, 4, 5), torch.float32, "cpu")
    with pytest.raises(RuntimeError, match="weights must be"):
        ops("cpp").lltm_forward(input, weights[:, 1:], bias, old_h, old_cell)
    with pytest.raises(RuntimeError, match="dtype"):
        ops("cpp").lltm_forward(input, weights.double(), bias, old_h, old_cell)


@pytest.mark.parametrize("variant", ["cpp", "cuda"], ids=variant_id)
def test_tutorial_variants_build_without_autograd_headers(variant):
    """cpp and cuda register autograd from Python, so their C++ includes neither torch/extension.h
    nor torch/csrc/autograd (about 10 s of a cold build); cuda-fast, whose speed rests on C++ autograd, does
    (through lltm_op.h, which cuda-graph shares)."""
    def heavy(v):
        variant = FAMILY.variants[v]
        text = "".join([*render.sources(FAMILY, variant, FAMILY.parse_params([])).values(),
                        *(render.header(FAMILY, variant, h) for h in variant.includes)])
        return re.findall(r"#include <(torch/extension\.h|torch/csrc/autograd/[^>]*)>", text)
    assert heavy(variant) == []
    assert heavy("cuda-fast") == ["torch/csrc/autograd/custom_function.h"]


@pytest.fixture
def wrong_elu_derivative(tmp_path):
    """A copy of the family whose ATen backward hands elu_backward the ELU's output as if it were its input:
    elu'(z) becomes exp(elu(z)) for z <= 0 instead of exp(z)."""
    folder = tmp_path / "lltm-wrong"
    shutil.copytree(FAMILY.path, folder)
    src = folder / "lltm.cpp"
    text = src.read_text()
    assert text.count("/*is_result=*/true") == 1
    src.write_text(text.replace("/*is_result=*/true", "/*is_result=*/false"))
    return registry.load_family(folder)


def test_checker_catches_a_wrong_backward(wrong_elu_derivative):
    """The forward still matches; d_input, d_weights, d_bias and d_old_h do not, and gradcheck fails."""
    fam = wrong_elu_derivative
    lib = ops("cpp", family=fam)
    xs = inputs((16, 32, 128), torch.float32, "cpu")
    ref, out = SPEC.reference(*xs), SPEC.call(lib, "cpp", *xs)
    tols, _ = SPEC.tolerance(*xs, torch.float32)
    bad = [name for name, o, r, t in zip(NAMES, out, ref, tols) if (o.double() - r).abs().max() > t]
    assert bad == ["d_input", "d_weights", "d_bias", "d_old_h"]
    assert not SPEC.gradcheck(SPEC.lltm_function(lib, "cpp"), "cpu")


# ---- cuda and cuda-fast: compile here, run on a GPU -----------------------------------------------------

CUDA_VARIANTS = ["cuda", "cuda-fast", "cuda-graph"]


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.parametrize("variant", CUDA_VARIANTS, ids=variant_id)
def test_cuda_sources_compile(variant):
    """nvcc and the C++ compiler accept the variant's .cu and .cpp (cuda-fast: with lt_matmul.h and
    cuBLASLt); the library loads and its ops register."""
    lib = ops(variant)
    assert lib.lltm_forward._schemas and lib.lltm_backward._schemas
    if variant in ("cuda-fast", "cuda-graph"):
        assert lib.lltm._schemas


# (variant, params): each variant's default, the tutorial's 1024 threads, and cuda-fast's other paths (built and
# checked on the GPU box; here test_cuda_sources_compile compiles each variant's default).
CUDA_BUILDS = [("cuda", {}), ("cuda", {"threads": 1024}), ("cuda-fast", {}), ("cuda-fast", {"streams": 2}),
               ("cuda-fast", {"threads": 1024}), ("cuda-fast", {"fwd_split": 2, "bwd_split": 2}),  # odd k: no split
               ("cuda-graph", {}), ("cuda-graph", {"streams": 2})]


def build_id(build):
    variant, params = build
    return ",".join([variant, *(f"{k}={v}" for k, v in params.items())])


@pytest.mark.cuda
@pytest.mark.parametrize("build", CUDA_BUILDS, ids=build_id)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [*SHAPES, (1024, 512, 1024), (70000, 2, 1)], ids=str)
def test_cuda_matches_reference(shape, dtype, build):
    variant, params = build
    assert_matches(lltm(variant, **params), inputs(shape, dtype, "cuda"), dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(6, 5, 7), (6, 5, 8)], ids=str)  # state 8: the 16-byte path, strided old_cell
@pytest.mark.parametrize("variant", ["cpp", *CUDA_VARIANTS], ids=variant_id)
def test_cuda_non_contiguous_inputs(variant, shape, dtype):
    assert_matches(lltm(variant), strided(inputs(shape, dtype, "cuda")), dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("variant", CUDA_VARIANTS, ids=variant_id)
def test_cuda_misaligned_inputs(variant, dtype):
    """Contiguous tensors that start one element past 16 bytes, after aligned ones of the same shape: the
    kernels must take their scalar path, and the matmuls must not reuse a plan that assumed alignment."""
    def shifted(x):
        return torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)[1:].view(x.shape).copy_(x)

    fn = lltm(variant)
    aligned = inputs((6, 8, 8), dtype, "cuda")  # rows of X and weights 16 floats: 16-byte loads possible
    assert_matches(fn, aligned, dtype)
    xs = [shifted(x) for x in aligned]
    assert all(x.data_ptr() % 16 for x in xs)
    assert_matches(fn, xs, dtype)


@pytest.mark.cuda
def test_cuda_fast_float32_matmuls_go_through_cublaslt():
    """cuda-fast, float32: no ATen matmul in the forward or the backward (cuBLASLt plans); float64 is ATen's,
    and so is every matmul of cuda, which also shows the profiler would see one."""
    from torch.profiler import ProfilerActivity, profile

    def aten_matmuls(fn, dtype):
        xs = inputs((16, 32, 128), dtype, "cuda")
        SPEC.forward_backward(fn, *xs)  # plans made, kernels loaded
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            SPEC.forward_backward(fn, *xs)
            torch.cuda.synchronize()
        return {e.name for e in prof.events()} & {"aten::mm", "aten::bmm", "aten::addmm"}

    assert not aten_matmuls(lltm("cuda-fast"), torch.float32)
    assert aten_matmuls(lltm("cuda-fast"), torch.float64)
    assert aten_matmuls(lltm("cuda"), torch.float32)


@pytest.mark.cuda
def test_cuda_graph_replays_new_values_and_never_overwrites_a_held_output():
    """cuda-graph: a call with the inputs of an earlier one replays its graph (cudaGraphLaunch, no kernel
    launched one by one) into the graph's own outputs, and reads values changed in place since; while a
    caller still holds those outputs, the call runs directly into new ones, recording a second graph, and
    the held ones stay right; from then on the two graphs take turns."""
    from torch.profiler import ProfilerActivity, profile

    dtype, lib = torch.float32, ops("cuda-graph")
    fn = lltm("cuda-graph")
    x = list(inputs((16, 32, 128), dtype, "cuda")[:5])

    def assert_cell(out, want):
        tols, _ = SPEC.tolerance(*x, *inputs((16, 32, 128), dtype, "cuda")[5:], dtype)
        for o, r, tol in zip(out, want, tols[:2]):
            assert (o.double() - r).abs().max().item() <= tol

    def reference():
        return SPEC.lltm_reference(*(t.double() for t in x))

    def counts():
        return lib.graph_counts()[:3]  # forward: replays, records, direct

    with torch.no_grad():
        for _ in range(3):  # run directly, recorded, replayed
            out = fn(*x)
            del out
        first, want_first = fn(*x), reference()  # a replay: the graph's outputs, handed out
        x[0].mul_(-1)  # new values at the same address
        before = counts()
        second = fn(*x)  # `first` is held: run directly into new outputs, and a second graph recorded
        assert counts() == [before[0], before[1] + 1, before[2]]
        assert_cell(second, reference())
        assert_cell(first, want_first)
        del first, second
        x[3].mul_(0.5)  # changed since the graphs were recorded
        before = counts()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            third = fn(*x)  # free again: a replay, which must read x[0] and x[3]'s new values
            torch.cuda.synchronize()
        fourth = fn(*x)  # `third` is held: the second graph replays
        assert counts() == [before[0] + 2, before[1], before[2]]
    names = {e.name for e in prof.events()}
    assert "cudaGraphLaunch" in names and not any("LaunchKernel" in n for n in names), sorted(names)
    assert_cell(third, reference())
    assert_cell(fourth, reference())


@pytest.mark.cuda
def test_cuda_graph_keeps_inference_mode_graphs_out_of_training():
    """A graph recorded under inference mode hands out inference tensors, which autograd cannot save: a
    training step on the same tensors afterwards gets graphs of its own, and the right gradients."""
    fn = lltm("cuda-graph")
    xs = inputs((16, 32, 128), torch.float32, "cuda")
    leaves = [x.detach().clone().requires_grad_() for x in xs[:5]]
    with torch.inference_mode():
        for _ in range(4):  # run directly, recorded, replayed, replayed
            out = fn(*leaves)
            del out
    ref, (tols, _) = SPEC.reference(*xs), SPEC.tolerance(*xs, torch.float32)
    for _ in range(4):
        new_h, new_cell = fn(*leaves)
        grads = torch.autograd.grad((new_h, new_cell), leaves, tuple(xs[5:]))
        got = (new_h.detach(), new_cell.detach(), *grads)
        for name, o, r, tol in zip(NAMES, got, ref, tols):
            assert (o.double() - r).abs().max().item() <= tol, name
        del new_h, new_cell, grads, got


@pytest.mark.cuda
def test_cuda_graph_runs_float64_directly():
    """float64's matmuls are ATen's, whose cuBLAS workspace a graph must not keep: the same call four times
    never replays, and stays right."""
    lib = ops("cuda-graph")
    fn = SPEC.lltm_function(lib, "cuda-graph")
    xs = inputs((16, 32, 128), torch.float64, "cuda")
    before = lib.graph_counts()
    for _ in range(4):
        assert_matches(fn, xs, torch.float64)
    after = lib.graph_counts()
    assert after[0] == before[0] and after[3] == before[3] and after[2] > before[2], (before, after)


@pytest.mark.cuda
@pytest.mark.parametrize("params", [{}, {"streams": 2}], ids=str)
@pytest.mark.parametrize("shape", [(16, 32, 128), (3, 7, 1025)], ids=str)
def test_cuda_graph_replays_forward_and_backward_right(shape, params):
    """cuda-graph in training: the same step again and again (leaves cloned each time, at the same addresses
    once the allocator has settled) runs directly, records, then replays both directions, and the replayed
    step's seven outputs are right."""
    lib = ops("cuda-graph", **params)
    fn = SPEC.lltm_function(lib, "cuda-graph")
    xs = inputs(shape, torch.float32, "cuda")
    ref, (tols, _) = SPEC.reference(*xs), SPEC.tolerance(*xs, torch.float32)
    out, replayed = None, False
    for _ in range(12):  # five steps, give or take the allocator's first growths
        out = None  # freed first: the next step gets the same addresses
        before = lib.graph_counts()
        out = SPEC.forward_backward(fn, *xs)
        after = lib.graph_counts()
        replayed = after[0] == before[0] + 1 and after[3] == before[3] + 1  # this step replayed both
        if replayed:
            break
    assert replayed, (before, after)
    for name, o, r, tol in zip(NAMES, out, ref, tols):
        assert (o.double() - r).abs().max().item() <= tol, name


@pytest.mark.cuda
def test_cuda_graph_backward_replays_after_forwards_that_ran_directly():
    """The backward copies in what the forward saved: with new inputs each step (kept, so the forwards run
    directly, their outputs at new addresses) and the same weights, the backward replays from the third step
    on (directly, directly and recorded, then replays; sooner where an earlier test left a graph of this
    signature), and its gradients are right."""
    lib = ops("cuda-graph")
    fn = SPEC.lltm_function(lib, "cuda-graph")
    xs = inputs((16, 32, 128), torch.float32, "cuda")
    ref, (tols, _) = SPEC.reference(*xs), SPEC.tolerance(*xs, torch.float32)
    weights, kept, got, steps = xs[1].detach().clone().requires_grad_(), [], None, []
    for _ in range(5):
        got = None  # the last step's gradients let go: the graph may replay into them
        leaves = [x.detach().clone().requires_grad_() for x in xs[:5]]
        leaves[1] = weights
        kept.append(leaves)
        before = lib.graph_counts()
        new_h, new_cell = fn(*leaves)
        got = (new_h.detach(), new_cell.detach(), *torch.autograd.grad((new_h, new_cell), leaves, tuple(xs[5:])))
        after = lib.graph_counts()
        steps.append((after[0] - before[0], after[3] - before[3]))  # (forward, backward) replays this step
    assert [bw for _, bw in steps[2:]] == [1, 1, 1], steps
    for name, o, r, tol in zip(NAMES, got, ref, tols):
        assert (o.double() - r).abs().max().item() <= tol, name


@pytest.mark.cuda
@pytest.mark.parametrize("variant", ["cpp", *CUDA_VARIANTS], ids=variant_id)
def test_cuda_gradcheck_float64(variant):
    assert SPEC.gradcheck(lltm(variant), "cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("variant", CUDA_VARIANTS, ids=variant_id)
def test_cuda_opcheck(variant):
    check_ops(variant, "cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("variant", CUDA_VARIANTS, ids=variant_id)
def test_cuda_one_output_used(variant):
    assert_one_output_used(lltm(variant), "cuda", 1)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", CUDA_VARIANTS, ids=variant_id)
def test_cuda_inference_mode(variant):
    assert_inference_mode(lltm(variant), "cuda")


TUTORIAL_ELU = "return fmaxf(0.0, z) + fminf(0.0, exp(z) - 1.0);"  # extension-cpp's, single precision
OUR_ELU = "return z > scalar_t(0) ? z : expm1(z);"


@pytest.fixture
def tutorial_elu(tmp_path):
    """A copy of the family whose CUDA elu, in both .cu files, is the tutorial's: fmaxf / fminf."""
    folder = tmp_path / "lltm-tutorial-elu"
    shutil.copytree(FAMILY.path, folder)
    for name in ("lltm_cuda.cu", "lltm_fast.cu"):
        src = folder / name
        text = src.read_text()
        assert text.count(OUR_ELU) == 1, name
        src.write_text(text.replace(OUR_ELU, TUTORIAL_ELU))
    return registry.load_family(folder)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", CUDA_VARIANTS, ids=variant_id)
def test_tutorial_float64_bug_fails_gradcheck(tutorial_elu, variant):
    """extension-cpp#42: the tutorial's elu rounds float64 to float32, and gradcheck catches it."""
    lib = ops(variant, family=tutorial_elu)
    assert not SPEC.gradcheck(SPEC.lltm_function(lib, variant), "cuda")
    assert SPEC.gradcheck(lltm(variant), "cuda")
