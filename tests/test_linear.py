"""linear: output and all three gradients against F.linear in float64, gradcheck, awkward shapes,
the nn.Module wrapper, the checker on known-wrong layers; CUDA sources compile without a GPU."""

import json
import re

import pytest
import torch
import torch.nn.functional as F

import playground
from playground.family import registry, spec as specs

from playground.run.check import compare

FAMILY = registry.find("linear")
spec = specs.module(FAMILY)
CUDA_VARIANTS = ["cuda-naive", "cuda-smem", "cuda-1d", "cuda-2d", "cuda-tiled", "cuda-warptile",
                 "cuda-double-buffer", "cuda-tensor-core"]  # the ladder, in order: float32 and float64
HALF_VARIANTS = ["cuda-mma", "cuda-pipeline", "cuda-wgmma", "cuda-tma", "cuda-warp-specialized",
                 "cuda-cluster", "cuda-tma-store"]  # then 16-bit
HOPPER = {"cuda-wgmma", "cuda-tma", "cuda-warp-specialized", "cuda-cluster",
          "cuda-tma-store"}  # built for sm_90a alone

# (batch, in, out): 1s, primes, not multiples of the 128-wide tiles nor of the 4-wide vector loads.
SHAPES = [(1, 17, 1023), (17, 1023, 1), (1023, 1, 17), (1000, 1000, 1023), (4, 3, 5), (130, 260, 129)]


def seeded(shape, dtype, device="cpu", seed=0):
    """x, weight, bias and the upstream gradient, as kplay makes them."""
    batch, fan_in, fan_out = shape
    gen = torch.Generator().manual_seed(seed)
    return [t.to(device) for t in spec.make_inputs({"batch": batch, "in": fan_in, "out": fan_out}, dtype, "cpu", gen)]


def mismatches(fn, x, w, b, gy, math=""):
    """The engine's comparison of fn's y and three gradients with float64 F.linear's, plus a dtype check."""
    got = spec.gradients(fn, x, w, b, gy)
    tols, source = spec.tolerance(x, w, b, gy, x.dtype, math=math)
    check = compare(got, spec.reference(x, w, b, gy), tols, source, "", spec.OUTPUTS)
    wrong = [f"{n}: {g.dtype}" for n, g in zip(spec.OUTPUTS, got) if isinstance(g, torch.Tensor) and g.dtype != x.dtype]
    return check.mismatches + wrong


@pytest.fixture(scope="module")
def cpp():
    return playground.load("linear", variant="cpp", device="cpu")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_cpp_output_and_gradients_match_F_linear(cpp, shape, dtype):
    x, w, b, gy = seeded(shape, dtype)
    assert mismatches(lambda *a: spec.linear(cpp, *a), x, w, b, gy) == []


def test_cpp_gradcheck_float64(cpp):
    x, w, b, _ = (t.requires_grad_() for t in seeded((5, 7, 3), torch.float64))
    assert torch.autograd.gradcheck(lambda *a: spec.linear(cpp, *a), (x, w, b))


def test_cpp_leaves_inputs_untouched_and_takes_views(cpp):
    x, w, b, _ = seeded((33, 40, 9), torch.float32)
    before = [t.clone() for t in (x, w, b)]
    xs = torch.randn(40, 18)[:, ::2].t()  # strided: every other column, transposed
    wt = w.t().contiguous().t()  # the same weight, stored column-major
    torch.testing.assert_close(spec.linear(cpp, xs, wt, b), F.linear(xs, w, b))
    spec.linear(cpp, x, w, b)
    assert all(torch.equal(a, c) for a, c in zip(before, (x, w, b)))


def test_module_wrapper_trains_like_nn_linear(cpp):
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 4)
    mine = spec.Linear(cpp, 6, 4)
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 6)  # leading dims, as nn.Linear takes
    for layer in (ref, mine):
        layer(x).square().sum().backward()
    torch.testing.assert_close(mine(x), ref(x))
    assert mine.weight.shape == (4, 6)  # (out_features, in_features), as in nn.Linear
    for p, q in zip(mine.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_seed_weight_layout_is_rejected(cpp):
    # Seed 002 built weight = randn(3, 5) for input (10, 3): (in, out), which addmm(b, x, W^T) cannot take.
    with pytest.raises(RuntimeError, match="features"):
        cpp.linear_forward(torch.randn(10, 3), torch.randn(3, 5), torch.randn(5))


def test_timing_is_the_forward_alone(cpp):
    # The check runs forward and backward; the time is the forward's, as the baseline F.linear's is.
    inputs = seeded((33, 40, 9), torch.float32)
    y = spec.function(cpp, "cpp")(*inputs)
    assert isinstance(y, torch.Tensor) and not y.requires_grad
    torch.testing.assert_close(y, spec.baseline(*inputs))


def test_call_returns_y_and_three_gradients_shaped_as_output_like(cpp):
    inputs = seeded((33, 40, 9), torch.float32)
    out = spec.call(cpp, "cpp", *inputs)
    assert [t.shape for t in out] == [t.shape for t in spec.output_like(*inputs)]
    assert [t.shape for t in out] == [(33, 9), (33, 40), (9, 40), (9,)] and len(spec.OUTPUTS) == 4


def test_api_run_reports_gflops_against_F_linear():
    r = playground.run("linear", sizes={"batch": 64, "in": 48, "out": 40}, device="cpu", budget_s=0.02)
    v = r.variants[0]
    assert r.ok and v.variant == "cpp" and len(v.check.cases) == len(FAMILY.test_sizes) + 3 + 2  # 3 drawn; the requested size, reused
    assert v.gflops > 0 and r.baselines["F.linear"].gflops > 0 and v.speedup == pytest.approx(r.baselines["F.linear"].time.median_s / v.time.median_s)


def test_cli_run(kplay):
    result = kplay("run", "linear", "--device", "cpu", "--batch", 33, "--in", 17, "--out", 9, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["sizes"] == {"batch": 33, "in": 17, "out": 9} and out["variants"][0]["gflops"] > 0


# Known-wrong layers (tests/wrong/linear/): each is built and run through the CLI, at the family's test
# sizes and a small main size; plain-PyTorch ones below test the tolerances alone, at every size.
def square_test_sizes(folder):
    """Test sizes with in == out only, so a transposed grad_weight has weight's shape and fails on its numbers."""
    toml = folder / "task.toml"
    text, removed = re.subn(r"\[\[test_sizes\]\]\n(?:\w+ = \d+\n)+", "", toml.read_text())
    assert removed == len(FAMILY.test_sizes)
    square = [(1, 1), (33, 17)]  # (batch, in = out)
    toml.write_text(text + "".join(f"\n[[test_sizes]]\nbatch = {b}\nin = {n}\nout = {n}\n" for b, n in square))


@pytest.mark.slow
@pytest.mark.parametrize("source, name, square", [  # test_wrong's grad_weight_scaled and skip_last_percent_k too
    ("grad_weight_transposed.cpp", "grad_weight", True),
])
def test_checker_fails_wrong_layer_and_names_the_output(kplay, wrong_kernel, source, name, square):
    folder = wrong_kernel("linear", f"linear/{source}")
    if square:
        square_test_sizes(folder)
    result = kplay("run", folder, "--device", "cpu", "--batch", 64, "--in", 48, "--out", 48, "--no-bench", "--json")
    assert result.exit_code == 1, result.output
    check = json.loads(result.stdout)["variants"][0]["check"]
    assert not check["ok"] and check["mismatches"]
    named = lambda m: f" {name}[" in m or f"'s {name} has shape" in m  # noqa: E731 (a drawn size need not be square)
    assert all(map(named, check["mismatches"])), check["mismatches"]  # and no other output


@pytest.mark.parametrize("source, message", [
    # Not square: autograd would refuse the shape in its own words; the spec says which gradient, and why.
    pytest.param("grad_weight_transposed.cpp", "linear_backward's grad_weight has shape (17, 1023); it must be shaped like "
                 "weight, (1023, 17)", marks=pytest.mark.slow),  # -m "not slow": comma_operator, one bad backward
    # Seed 002's `return a, b, c;` declared as one tensor: the comma operator keeps only grad_bias.
    ("comma_operator.cpp", "linear_backward returns 1 tensor; the backward needs 3 (grad_input, grad_weight, grad_bias)"),
])
def test_a_backward_of_the_wrong_count_or_shape_is_named_in_the_kernels_terms(kplay, wrong_kernel, source, message):
    result = kplay("run", wrong_kernel("linear", f"linear/{source}"), "--device", "cpu", "--no-bench")
    assert result.exit_code == 1, result.output  # a failed check (the spec's WrongOutput), not a crash
    assert re.search(rf"batch=1 in=17 out=1023 [\w+]+: {re.escape(message)}", " ".join(result.stdout.split())), result.stdout


@pytest.mark.slow  # -m "not slow": test_cli's compile error in a student's file
def test_seed_comma_operator_in_a_three_tensor_backward_is_a_compile_error_in_the_students_file(kplay, wrong_kernel):
    folder = wrong_kernel("linear", "linear/comma_operator_tuple.cpp")
    line = (folder / "linear.cpp").read_text().splitlines().index("  return grad_input, grad_weight, grad_bias;") + 1
    result = kplay("run", folder, "--device", "cpu", "--no-bench")
    assert result.exit_code == 3, result.output
    assert f"compile error in linear.cpp:{line}:" in result.stderr, result.stderr
    assert f"{folder / 'linear.cpp'}:{line}" in result.stderr  # the compiler's line, in the student's own file


def bf16_linear(x, w, b):
    return F.linear(x.bfloat16(), w.bfloat16(), b.bfloat16()).to(x.dtype)


def skip_last_percent_k(x, w, b):
    k = x.shape[1] - -(-x.shape[1] // 100)  # the last 1% of the k-sum dropped, at least one term
    return F.linear(x[:, :k], w[:, :k], b)


WRONG_FORWARD = {
    "no_bias": lambda x, w, b: x @ w.t(),
    "skip_first_k": lambda x, w, b: F.linear(x[:, 1:], w[:, 1:], b),
    "skip_last_percent_k": skip_last_percent_k,
    "bf16": bf16_linear,
}
EVERY_SIZE = [(t["batch"], t["in"], t["out"]) for t in [*FAMILY.test_sizes, FAMILY.sizes]] + [(1024, 4096, 64)]


@pytest.mark.parametrize("name", WRONG_FORWARD)
@pytest.mark.parametrize("shape", EVERY_SIZE, ids=str)
def test_tolerance_fails_wrong_forward(name, shape):
    x, w, b, gy = seeded(shape, torch.float32)
    tol = spec.gradient_tolerances(x, w, b, gy, torch.float32)[0]  # y's, as in the engine's check
    ref = F.linear(x.double(), w.double(), b.double())  # spec.reference's y, without the backward
    check = compare(WRONG_FORWARD[name](x, w, b), ref, tol, "")
    assert not check.ok and check.max_abs_err > tol
    assert compare(F.linear(x, w, b), ref, tol, "").ok  # F.linear itself passes


def to_tf32(t):
    """float32 rounded to TF32 as the tensor cores' conversion rounds (to nearest, 10 mantissa bits)."""
    return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def tf32_outputs(x, w, b, gy, k_kept=None):
    """y and the gradients as cuda-tensor-core makes them: each product of TF32-rounded inputs, summed in
    float64 and rounded to float32 (no worse than the tensor cores' float32 sums); optionally y over the
    first k_kept terms of k only (a kernel that skips the last ones)."""
    def nt(a, bt):
        return (to_tf32(a).double() @ to_tf32(bt).double().T).float()
    k = x.shape[1] if k_kept is None else k_kept
    return nt(x[:, :k], w[:, :k]) + b, nt(gy, w.T), nt(gy.T, x.T), gy.sum(0)


@pytest.mark.parametrize("shape", [pytest.param(s, marks=pytest.mark.slow) if s[0] * s[1] * s[2] > 1e8 else s
                                   for s in EVERY_SIZE], ids=str)  # -m "not slow": the test sizes
def test_tf32_tolerance_passes_tf32_products_and_fails_a_skipped_percent_of_k(shape):
    """cuda-tensor-core's bound (task.toml's math = "tf32"): TF32 products pass for all three products; y with
    the last 1% of k skipped (one term at least) fails it."""
    x, w, b, gy = seeded(shape, torch.float32)
    tols, source = specs.tolerance_for(specs.load(FAMILY), (x, w, b, gy), torch.float32, "tf32")  # the engine's path
    ref = spec.reference(x, w, b, gy)
    assert compare(tf32_outputs(x, w, b, gy), ref, tols, source, "", spec.OUTPUTS).ok
    skipped = tf32_outputs(x, w, b, gy, k_kept=x.shape[1] - -(-x.shape[1] // 100))
    assert not compare(skipped[0], ref[0], tols[0], "").ok


def test_tf32_needs_its_own_tolerance_and_float64_keeps_its_own():
    """At (1000, 1000, 1023) float32's bound fails TF32's honest products, which is why the variant declares
    its math; a float64 run of the same variant keeps float64's bound."""
    x, w, b, gy = seeded((1000, 1000, 1023), torch.float32)
    ref = spec.reference(x, w, b, gy)
    assert not compare(tf32_outputs(x, w, b, gy)[0], ref[0], spec.tolerance(x, w, b, gy, torch.float32)[0][0], "").ok
    x64 = [t.double() for t in (x, w, b, gy)]
    loaded = specs.load(FAMILY)
    assert specs.tolerance_for(loaded, x64, torch.float64, "tf32") == specs.tolerance_for(loaded, x64, torch.float64)


def test_the_timing_guard_judges_a_tf32_variant_by_tf32s_tolerance():
    """trust.TimedOutputs, as kplay run builds it (the engine's loaded spec, each variant's task.toml math): TF32
    products pass for the variant that says math = "tf32" and fail a float32 variant's bound."""
    from playground.run import audit as trust

    x, w, b, gy = seeded((1000, 1000, 1023), torch.float32)
    guard = trust.TimedOutputs(specs.load(FAMILY), [(x, w, b, gy)], torch.float32, 0,
                               maths={v: var.math for v, var in FAMILY.variants.items()})
    y = tf32_outputs(x, w, b, gy)[0]
    for variant in ("cuda-tensor-core", "cuda-tiled"):
        guard.observe(("variant", variant, "forward"), 0, y)
    assert guard.findings("cuda-tensor-core", {"forward": None}) == []
    assert "y off by" in guard.findings("cuda-tiled", {"forward": None})[0]


class WrongBackward(torch.autograd.Function):
    """F.linear's forward with a broken backward, chosen by `bug`."""

    @staticmethod
    def forward(ctx, x, w, b, bug):
        ctx.save_for_backward(x, w)
        ctx.bug = bug
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        grads = {"grad_input": gy @ w, "grad_weight": gy.t() @ x, "grad_bias": gy.sum(0)}
        if ctx.bug == "seed_comma_operator":  # `return gi, gw, gb;` in C++ returns gb alone
            return None, None, grads["grad_bias"], None
        if ctx.bug == "bias_mean":
            grads["grad_bias"] = gy.mean(0)
        if ctx.bug == "grad_input_of_transposed_W":  # the right shape only because in == out
            grads["grad_input"] = gy @ w.t()
        return grads["grad_input"], grads["grad_weight"], grads["grad_bias"], None


@pytest.mark.parametrize("bug, names", [
    ("seed_comma_operator", {"grad_input", "grad_weight"}),
    ("bias_mean", {"grad_bias"}),
    ("grad_input_of_transposed_W", {"grad_input"}),
])
def test_gradient_checks_fail_wrong_backward(bug, names):
    x, w, b, gy = seeded((6, 5, 5), torch.float32)
    assert mismatches(F.linear, x, w, b, gy) == []
    bad = mismatches(lambda *a: WrongBackward.apply(*a, bug), x, w, b, gy)
    assert bad and {n for n in spec.OUTPUTS if any(m.startswith(n) for m in bad)} == names, bad


# The ladder's files and tiles: no GPU and no build needed.
def test_ls_shows_the_climb_each_step_opening_with_its_idea_and_no_measurements():
    """`ls` lists the steps in order under their variants' names; each file's first two lines are its one idea
    (naming its step and variant) and what changed from the step before; figures belong in the README."""
    steps = sorted((p.name for p in FAMILY.path.glob("[0-9]*_*.cu")), key=lambda name: int(name.split("_")[0]))
    ladder = CUDA_VARIANTS + HALF_VARIANTS
    assert steps == [f"{k}_{v.removeprefix('cuda-').replace('-', '_')}.cu" for k, v in enumerate(ladder, 1)]
    measured = re.compile(r"H100|H200|A100|A6000|[TG]FLOP|GB/s|\d ?(ms|us|ns)\b|\d\.\d+x\b")
    for k, (name, variant) in enumerate(zip(steps, ladder), 1):
        lines = (FAMILY.path / name).read_text().splitlines()
        assert lines[0].startswith(f"// Step {k} of the matmul ladder ({variant}): "), lines[0]
        assert lines[1].startswith("// From step " if k > 1 else "// ") and len(lines[1]) > 20, lines[1]
        assert FAMILY.variants[variant].sources[-1] == name
        head = "\n".join(line for line in lines[:next(i for i, s in enumerate(lines) if not s.startswith("//"))])
        assert not measured.search(head), (name, measured.search(head))


# Three combinations a ladder step refuses, in the steps' own params: each a rule's line, exit 2, no build.
REFUSED = [
    (["--variant", "cuda-1d", "--param", "block=128", "--param", "thread_m=4"],
     "linear/cuda-1d cannot take block=128, thread_m=4: at most 1024 threads per block "
     "(block * block / thread_m = 4,096 > 1024)"),
    (["--variant", "cuda-2d", "--param", "block_m=256", "--param", "block_n=256", "--param", "block_k=32"],
     "linear/cuda-2d cannot take block_m=256, block_n=256, block_k=32: the float64 tiles must fit in 48 KB of "
     "static shared memory ((block_m + block_n) * block_k * 8 = 131,072 > 48 * 1024)"),
    (["--variant", "cuda-warptile", "--param", "warp_m=128", "--param", "block_m=64"],
     "linear/cuda-warptile cannot take block_m=64, warp_m=128: a block tile is a whole number of warp tiles "
     "(block_m % warp_m = 64 != 0)"),
]


@pytest.mark.parametrize("args, says", REFUSED, ids=["1d-threads", "2d-shared-memory", "warptile-warp-tiles"])
def test_a_combination_a_step_cannot_take_is_one_line_and_exit_2_before_any_build(kplay, monkeypatch, args, says):
    import time

    from playground.child import spawn as isolate
    from playground.compiler import build

    def never(*_, **__):
        raise AssertionError("refused before any build: no child, no compiler")

    monkeypatch.setattr(isolate, "run", never)
    monkeypatch.setattr(build, "build", never)
    start = time.perf_counter()
    result = kplay("run", "linear", *args)
    assert time.perf_counter() - start < 1
    assert result.exit_code == 2 and result.stderr.strip() == f"error: {says}", result.output  # one line


def test_every_step_takes_its_own_defaults():
    """Each variant's defaults pass its constraints (task.toml is refused otherwise); no param has a prefix."""
    for v in FAMILY.variants.values():
        params = FAMILY.params_for(v, FAMILY.parse_params([], [v]))
        assert all(rule.holds(params) for rule in v.constraints)
        assert not any(name.startswith(("wt_", "bt1_", "smem_")) for name in params), params
    assert FAMILY.params == {}  # every tile belongs to its step


def test_with_variant_all_a_param_applies_to_every_step_that_declares_it():
    """--variant all --param block_m=64: the steps with a block_m take 64, the others keep theirs; a value one of
    them cannot take, and a name none of them has, are refused in one line."""
    from playground.core.errors import UsageError
    from playground.family import request

    req = request.make("linear", device="cuda", variant="all", params=["block_m=64"])
    built = {v.name: FAMILY.params_for(v, req.params) for v in FAMILY.variants_for("cuda")}
    assert {n for n, p in built.items() if p.get("block_m") == 64} == {"cuda-2d", "cuda-tiled", "cuda-warptile",
                                                                     "cuda-double-buffer", "cuda-pipeline"}
    assert built["cuda-1d"] == {"block": 64, "block_k": 8, "thread_m": 8} and built["cuda-smem"] == {"tile": 32}
    with pytest.raises(UsageError, match=r"--param block_m=32 \(cuda-warptile's\): valid values are 64, 128, 256"):
        request.make("linear", device="cuda", variant="all", params=["block_m=32"])
    with pytest.raises(UsageError, match="linear has no parameter 'warp'; valid: tile, block, block_k, thread_m, "):
        request.make("linear", device="cuda", variant="all", params=["warp=64"])
    with pytest.raises(UsageError, match=r"--param warp_m: cuda-2d has no such parameter; it is a parameter of "
                                         r"cuda-warptile, cuda-double-buffer \(pick one with --variant\)"):
        request.make("linear", device="cuda", variant="cuda-2d", params=["warp_m=64"])


def preamble(text: str) -> str:
    """A step's constants and static_asserts: from its namespace's start to its first kernel or device function."""
    body = text[text.index("namespace KPLAY_NS {") + len("namespace KPLAY_NS {"):]
    ends = [body.find("\ntemplate <typename T>\n__global__"), body.find("\n__device__")]
    return body[:min(i for i in ends if i >= 0)]


@pytest.mark.parametrize("variant", [v for v in CUDA_VARIANTS if FAMILY.variants[v].params])
def test_the_constraints_refuse_exactly_what_the_static_asserts_refuse(variant, tmp_path):
    """Every combination of the step's choices: its constants and static_asserts (ladder.cuh's WarpTiles too) in a
    namespace of their own, checked by the C++ compiler with -fsyntax-only (a second or so, no nvcc), against
    the constraints task.toml states."""
    import bisect
    import itertools
    import os
    import subprocess

    from playground.family import render

    v = FAMILY.variants[variant]
    shape = re.search(r"template <int BM, [^>]*>\nstruct WarpTiles \{.*?\n\};\n", (FAMILY.path / "ladder.cuh").read_text(),
                      re.S).group(0)
    text = preamble((FAMILY.path / v.sources[-1]).read_text())
    combos = [dict(zip(v.params, values)) for values in itertools.product(*(p.choices for p in v.params.values()))]
    combos.append({k: 2 * max(p.choices) for k, p in v.params.items()})  # past every choice: both must refuse it
    lines, starts = ["#include <cstddef>", "#include <cstdint>"], []
    for k, combo in enumerate(combos):
        starts.append(len(lines) + 1)
        lines += [f"namespace c{k} {{", *shape.splitlines(), *render.render(text, combo).splitlines(), "}"]
    source = tmp_path / f"{variant}.cpp"
    source.write_text("\n".join(lines) + "\n")
    compiled = subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-fsyntax-only", "-fmax-errors=0",
                               str(source)], capture_output=True, text=True)
    errors = {int(n) for n in re.findall(rf"^{re.escape(str(source))}:(\d+):\d+: error:", compiled.stderr, re.M)}
    by_cpp = {bisect.bisect_right(starts, n) - 1 for n in errors}
    by_rules = {k for k, combo in enumerate(combos) if not all(rule.holds(combo) for rule in v.constraints)}
    assert len(combos) - 1 in by_cpp, compiled.stderr[:2000]  # the compiler saw the asserts: the test means something
    assert by_rules == by_cpp, [(combos[k], "C++ only" if k in by_cpp else "rules only") for k in by_rules ^ by_cpp][:5]


OLD = "725e0cd"  # the ladder before its files were named as its steps and its tiles were per step


@pytest.fixture
def old_linear(tmp_path):
    """The family folder as it was before the rename (blocktile1d.cu, wt_block_m, ...), from git."""
    import io
    import subprocess
    import tarfile

    from conftest import ROOT

    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD, "snippets/linear"], capture_output=True,
                                 check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"needs git and the commit {OLD} (a full clone)")
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(tmp_path, filter="data")
    return tmp_path / "snippets" / "linear"


def test_a_folder_from_before_the_rename_loads_and_renders_its_family_params(old_linear):
    """Family-level [params.*] still work: wt_block_m reaches warptile.cu, and a copy or an ejected folder of the
    old ladder keeps its own file names."""
    from playground.family import render, request

    old = registry.load_family(old_linear)
    assert "wt_block_m" in old.params and old.variants["cuda-warptile"].sources[-1] == "warptile.cu"
    req = request.make(str(old_linear), device="cuda", variant="cuda-warptile", params=["wt_block_m=64"])
    text = render.sources(old, old.variants["cuda-warptile"], req.params)["warptile.cu"]
    assert "constexpr int BM = 64;" in text


@pytest.mark.slow
def test_a_folder_ejected_from_before_the_move_says_in_one_line_how_to_start_again(kplay, old_linear, tmp_path):
    """Its spec.py imports the engine's old module (playground.check): one line, exit 2, how to eject anew."""
    ejected = tmp_path / "ejected"
    assert kplay("eject", old_linear, ejected).exit_code == 0
    assert (ejected / "blocktile1d.cu").exists() and (ejected / "tile_io.cuh").exists()
    result = kplay("run", ejected, "--device", "cpu", "--batch", 33, "--in", 17, "--out", 9, "--no-bench")
    assert result.exit_code == 2 and "playground.check" in result.output, result.output
    assert "kplay eject linear NEW-DIR" in result.output and "Traceback" not in result.output


# CUDA: the sources compile on any machine with nvcc (no GPU: for sm_90); correctness needs a GPU.
@pytest.mark.nvcc
@pytest.mark.parametrize("variant, params", [
    *(pytest.param(v, {}, marks=pytest.mark.slow) for v in CUDA_VARIANTS + HALF_VARIANTS),  # sm_90a: its own arch
    pytest.param("cuda-smem", {"tile": 16}, marks=pytest.mark.slow),
    pytest.param("cuda-1d", {"block": 32, "block_k": 16, "thread_m": 4}, marks=pytest.mark.slow),
    pytest.param("cuda-tiled", {"block_m": 64, "block_n": 64, "block_k": 16, "thread_m": 4, "thread_n": 4}, marks=pytest.mark.slow),
    pytest.param("cuda-warptile", {"warp_n": 32, "block_k": 8, "thread_n": 8}, marks=pytest.mark.slow),
    pytest.param("cuda-pipeline", {"block_n": 256, "warps_m": 2, "warps_n": 4, "stages": 4}, marks=pytest.mark.slow),
], ids=[*(v.removeprefix("cuda-") for v in CUDA_VARIANTS + HALF_VARIANTS), "smem-16", "1d-32", "tiled-64x64", "warptile-64x32",
        "pipeline-128x256"])
def test_cuda_sources_compile(variant, params):
    ops = playground.load("linear", variant=variant, device="cuda", params=params)
    assert hasattr(ops, "linear_forward") and hasattr(ops, "linear_backward")


@pytest.fixture(scope="module", params=CUDA_VARIANTS)
def cuda_ops(request):
    return request.param, playground.load("linear", variant=request.param, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_cuda_output_and_gradients_match_F_linear(cuda_ops, shape, dtype):
    name, ops = cuda_ops
    x, w, b, gy = seeded(shape, dtype, "cuda")
    assert mismatches(lambda *a: spec.linear(ops, *a), x, w, b, gy, FAMILY.variants[name].math) == []


@pytest.mark.cuda
def test_cuda_gradcheck_float64(cuda_ops):
    _, ops = cuda_ops
    x, w, b, _ = (t.requires_grad_() for t in seeded((5, 7, 3), torch.float64, "cuda"))
    assert torch.autograd.gradcheck(lambda *a: spec.linear(ops, *a), (x, w, b))


@pytest.mark.cuda
def test_cuda_misaligned_and_strided_inputs(cuda_ops):
    name, ops = cuda_ops
    batch, fan_in, fan_out = 129, 260, 131
    # Dense but 4 bytes past a 16-byte boundary: the tiled kernel must fall back from float4 loads.
    x = torch.randn(batch * fan_in + 1, device="cuda")[1:].view(batch, fan_in)
    w = torch.randn(fan_in, fan_out, device="cuda").t()  # a transposed view
    b = torch.randn(2 * fan_out, device="cuda")[::2]
    ref = F.linear(x.double(), w.double(), b.double())
    tol = spec.product_tolerance(x, w, torch.float32, b, tf32=FAMILY.variants[name].math == "tf32")
    assert (spec.linear(ops, x, w, b).double() - ref).abs().max().item() <= tol


@pytest.mark.cuda
def test_cuda_module_wrapper(cuda_ops):
    name, ops = cuda_ops
    close = 1e-2 if FAMILY.variants[name].math == "tf32" else 1e-5  # TF32 keeps 10 mantissa bits
    torch.manual_seed(0)
    ref = torch.nn.Linear(70, 33, device="cuda")
    mine = spec.Linear(ops, 70, 33, device="cuda")
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(3, 5, 70, device="cuda")
    for layer in (ref, mine):
        layer(x).square().sum().backward()
    torch.testing.assert_close(mine(x), ref(x), rtol=close, atol=close)
    for p, q in zip(mine.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=10 * close, atol=10 * close)


@pytest.mark.cuda
@pytest.mark.parametrize("params", [
    {"block_m": 64, "block_n": 64, "block_k": 16, "thread_m": 4, "thread_n": 4},
    {"block_m": 128, "block_n": 64, "block_k": 16, "thread_m": 8, "thread_n": 4},
], ids=["64x64x16-4x4", "128x64x16-8x4"])
def test_cuda_tiled_other_tiles(params):
    ops = playground.load("linear", variant="cuda-tiled", device="cuda", params=params)
    for shape in [(1, 17, 1023), (1000, 1000, 1023), (130, 260, 129)]:
        x, w, b, gy = seeded(shape, torch.float32, "cuda")
        assert mismatches(lambda *a: spec.linear(ops, *a), x, w, b, gy) == [], (params, shape)


def float32_steps() -> list[str]:
    """What --variant all runs in float32: the CUDA-core ladder, then the steps that take it as TF32 (Hopper's
    on Hopper alone)."""
    hopper = torch.cuda.get_device_capability() == (9, 0)
    return CUDA_VARIANTS + ["cuda-pipeline"] + ["cuda-warp-specialized"] * hopper


@pytest.mark.cuda
def test_cuda_api_run_all_variants():
    r = playground.run("linear", sizes={"batch": 512, "in": 384, "out": 640}, device="cuda", variant="all",
                       budget_s=0.05)
    assert r.ok and [v.variant for v in r.variants] == float32_steps(), [(v.variant, v.check.ok) for v in r.variants]
    assert all(v.gflops > 0 for v in r.variants) and r.baselines["F.linear"].gflops > 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cpp_in_half_precision_passes_and_a_cuda_step_refuses_it(kplay, dtype):
    """Half-precision inputs, float32 sums (ATen's, F.linear's): the tolerance adds the output's one rounding."""
    ran = kplay("run", "linear", "--variant", "cpp", "--dtype", dtype, "--batch", "64", "--in", "96", "--out", "80",
                "--no-bench", "--json")
    assert ran.exit_code == 0, ran.output
    check = json.loads(ran.stdout)["variants"][0]["check"]
    assert check["ok"] and 0 < check["max_abs_err"] <= check["tolerance"], check
    refused = kplay("run", "linear", "--variant", "cuda-naive", "--dtype", dtype, "--device", "cuda")
    assert refused.exit_code == 2 and f"linear/cuda-naive takes float32, float64, not {dtype}" in refused.stderr


# The tensor-core steps: bfloat16 and float16 inputs, float32 sums, against float64 F.linear with the half
# tolerance (the float32 bound plus one ulp of the output). The Hopper steps need compute capability 9.0.
def test_a_tensor_core_step_takes_16_bit_dtypes_and_check_grades_them(kplay):
    from playground.workshop import exercise

    assert exercise.graded(FAMILY, FAMILY.variants["cuda-mma"]) == ["bfloat16", "float16"]
    assert exercise.graded(FAMILY, FAMILY.variants["cuda-pipeline"]) == ["bfloat16", "float16", "float32"]
    assert exercise.graded(FAMILY, FAMILY.variants["cuda-warp-specialized"]) == ["bfloat16", "float16", "float32"]
    assert exercise.graded(FAMILY, FAMILY.variants["cpp"]) == ["float32", "float64"]
    assert {FAMILY.variants[v].arch for v in HOPPER} == {"9.0a"}
    refused = kplay("run", "linear", "--variant", "cuda-wgmma", "--dtype", "float32", "--device", "cuda")
    assert refused.exit_code == 2 and "linear/cuda-wgmma takes bfloat16, float16, not float32" in refused.stderr


def half_ops(variant):
    major, minor = torch.cuda.get_device_capability()
    if variant in HOPPER and (major, minor) != (9, 0):
        pytest.skip(f"{variant} is built for sm_90a; this GPU is sm_{major}{minor}")
    return playground.load("linear", variant=variant, device="cuda")


HALF_SHAPES = [(1, 1, 1), (4097, 33, 65), (64, 4096, 64), (1, 17, 1023), (1023, 1, 17), (130, 260, 129),
               (256, 255, 257), (300, 128, 512), (300, 128, 264), (70, 96, 40)]
# (batch, in, out): partial tiles, k under 8 and not a multiple; out a multiple of 8 (cuda-tma-store's TMA
# stores) with a partial box of 64 columns, and under 64


@pytest.mark.cuda
@pytest.mark.parametrize("variant", HALF_VARIANTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_tensor_core_steps_match_F_linear_forward_and_backward(variant, dtype):
    ops = half_ops(variant)
    for shape in HALF_SHAPES:
        x, w, b, gy = seeded(shape, dtype, "cuda")
        assert mismatches(lambda *a: spec.linear(ops, *a), x, w, b, gy) == [], (variant, shape)


TF32_STEPS = ["cuda-pipeline", "cuda-warp-specialized"]  # mma.sync m16n8k8; wgmma m64n256k8 (Hopper)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", TF32_STEPS)
def test_the_tf32_steps_take_float32(variant):
    """float32 rounded to TF32, within the TF32 tolerance; k not a multiple of 4 and a misaligned base take
    cuda-pipeline's value-by-value copy, and the binding's padded copy for cuda-warp-specialized's TMA."""
    ops = half_ops(variant)
    for shape in HALF_SHAPES:
        x, w, b, gy = seeded(shape, torch.float32, "cuda")
        assert mismatches(lambda *a: spec.linear(ops, *a), x, w, b, gy, "tf32") == [], shape
    for k in (261, 260):  # 260: k whole, x's base alone misaligned (the binding copies x alone)
        x = torch.randn(129 * k + 1, device="cuda")[1:].view(129, k)
        w, b = torch.randn(131, k, device="cuda"), torch.randn(131, device="cuda")
        tol = spec.product_tolerance(x, w, torch.float32, b, tf32=True)
        assert (spec.linear(ops, x, w, b).double() - F.linear(x.double(), w.double(), b.double())).abs().max() <= tol


@pytest.mark.cuda
@pytest.mark.parametrize("params", [{"stages": 2}, {"stages": 5}, {"block_m": 256, "warps_m": 4, "stages": 4}],
                         ids=["2-stages", "5-stages", "256x128-4-stages"])
def test_the_pipeline_step_at_other_depths_and_tiles(params):
    """Its wait counts groups: at 2 stages the next step's copy is the newest group, at 5 three are newer; k of
    one step to 128, in bfloat16 and as TF32."""
    ops = playground.load("linear", variant="cuda-pipeline", device="cuda", params=params)
    for dtype, math in [(torch.bfloat16, ""), (torch.float32, "tf32")]:
        for shape in [(1, 1, 1), (130, 260, 129), (64, 4096, 64), (300, 128, 264)]:
            x, w, b, gy = seeded(shape, dtype, "cuda")
            assert mismatches(lambda *a: spec.linear(ops, *a), x, w, b, gy, math) == [], (params, dtype, shape)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", TF32_STEPS)
@pytest.mark.parametrize("k", [64, 61])  # 61: the value-by-value copy, or the padded one
def test_the_tf32_steps_round_float32_to_the_nearest_tf32(variant, k):
    """The tensor cores drop a float's low 13 bits; the kernel rounds first, so 1 + 0.75 * 2^-10 enters as
    1 + 2^-10 (truncated: 1; unrounded: itself). -(1 + 0.5 * 2^-10) is a tie: to even (-1) on Hopper, as cuBLAS
    does, away from zero (-(1 + 2^-10)) before it. y's sums are exact. A NaN with a mantissa of all ones
    (CUDA's own, either sign) stays a NaN, and inf stays inf."""
    ops = half_ops(variant)
    w, b = torch.ones(8, k, device="cuda"), torch.zeros(8, device="cuda")
    tie = -1.0 if torch.cuda.get_device_capability() >= (9, 0) else -(1 + 2 ** -10)
    for v, tf32 in [(1 + 0.75 * 2 ** -10, 1 + 2 ** -10), (-(1 + 0.5 * 2 ** -10), tie), (1.25, 1.25)]:
        y = spec.linear(ops, torch.full((16, k), v, device="cuda"), w, b)
        assert torch.equal(y, torch.full_like(y, k * tf32)), (v, y[0, 0].item())
    x = torch.ones(16, k, device="cuda")
    x.view(torch.int32)[0, 0], x.view(torch.int32)[1, 1], x[2, 2] = 0x7FFFFFFF, -1, float("inf")
    y = spec.linear(ops, x, w, b)
    assert y[:2].isnan().all() and (y[2] == float("inf")).all() and torch.equal(y[3:], torch.full_like(y[3:], k))


@pytest.mark.cuda
@pytest.mark.parametrize("variant", HALF_VARIANTS)
def test_tensor_core_steps_take_misaligned_and_strided_inputs(variant):
    """A base 2 bytes past 16, a transposed weight, a strided bias: the binding pads a copy to 16-byte rows."""
    ops = half_ops(variant)
    batch, fan_in, fan_out = 129, 260, 131
    x = torch.randn(batch * fan_in + 1, device="cuda", dtype=torch.bfloat16)[1:].view(batch, fan_in)
    w = torch.randn(fan_in, fan_out, device="cuda", dtype=torch.bfloat16).t()
    b = torch.randn(2 * fan_out, device="cuda", dtype=torch.bfloat16)[::2]
    ref = F.linear(x.double(), w.double(), b.double())
    tol = spec.product_tolerance(x, w, torch.bfloat16, b)
    assert (spec.linear(ops, x, w, b).double() - ref).abs().max().item() <= tol


@pytest.mark.cuda
def test_run_all_times_each_step_in_its_own_dtype(kplay):
    """--variant all and no --dtype: the float32 ladder, then the tensor-core steps in bfloat16 against F.linear
    in bfloat16; the Hopper steps only on Hopper (else a warning each)."""
    result = kplay("run", "linear", "--device", "cuda", "--variant", "all", "--batch", "256", "--in", "320",
                   "--out", "384", "--json")
    rec = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    assert rec["dtype"] == "float32" and [v["variant"] for v in rec["variants"]] == float32_steps()
    (half,) = rec["other_runs"]
    on_hopper = torch.cuda.get_device_capability() == (9, 0)
    ran = [v for v in HALF_VARIANTS if on_hopper or v not in HOPPER]
    assert half["dtype"] == "bfloat16" and [v["variant"] for v in half["variants"]] == ran
    assert all(v["gflops"] > 0 for v in half["variants"]) and half["baselines"]["F.linear"]["gflops"] > 0


@pytest.mark.cuda
@pytest.mark.parametrize("variant", HALF_VARIANTS)
def test_tensor_core_steps_are_clean_under_memcheck_and_racecheck(kplay, variant):
    """out 136: the forward's C takes cuda-tma-store's TMA stores (a partial box), the backward's its fallback."""
    half_ops(variant)
    for tool in ("memcheck", "racecheck"):
        result = kplay("run", "linear", "--variant", variant, "--batch", "33", "--in", "65", "--out", "136",
                       "--sanitize", tool)
        assert result.exit_code == 0 and "clean" in result.stdout, (tool, result.output)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_cuda_core_steps_are_clean_under_memcheck_and_racecheck(kplay, variant):
    """float32 at partial tiles in every dimension, k not a multiple of 4: the scalar edges of the copies."""
    for tool in ("memcheck", "racecheck"):
        result = kplay("run", "linear", "--variant", variant, "--device", "cuda", "--batch", "33", "--in", "65",
                       "--out", "129", "--sanitize", tool)
        assert result.exit_code == 0 and "clean" in result.stdout, (tool, result.output)


@pytest.mark.cuda
def test_the_wgmma_tf32_step_is_clean_under_memcheck_and_racecheck_with_its_padded_copies(kplay):
    """float32 at in 65: both operands copied into padded rows for TMA, the stages rounded by the producer."""
    half_ops("cuda-warp-specialized")
    for tool in ("memcheck", "racecheck"):
        result = kplay("run", "linear", "--variant", "cuda-warp-specialized", "--dtype", "float32", "--batch", "33",
                       "--in", "65", "--out", "136", "--sanitize", tool)
        assert result.exit_code == 0 and "clean" in result.stdout, (tool, result.output)


@pytest.mark.cuda
def test_the_wgmma_step_shows_hgmma_under_its_source_lines(kplay):
    half_ops("cuda-wgmma")
    result = kplay("show", "linear", "--variant", "cuda-wgmma", "--sass", "--solution")
    assert result.exit_code == 0 and "HGMMA" in result.stdout, result.output[-2000:]


@pytest.mark.cuda
def test_profile_shows_the_wgmma_step_busy_on_the_tensor_pipe(kplay):
    """Where ncu can read the counters (the GPU box: root): the tensor pipe's share of its peak, per kernel."""
    half_ops("cuda-wgmma")
    result = kplay("profile", "linear", "--variant", "cuda-wgmma", "--batch", "2048", "--in", "2048", "--out", "2048")
    assert result.exit_code == 0 and "tensor%" in result.stdout, result.output[-3000:]
