"""The CUDA sum ladder: every variant compiles here with nvcc; on a GPU, every variant is right."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from playground.family import registry
from playground.compiler.build import build
from playground.family.spec import module as load_spec

FAMILY = registry.find("sum")
SPEC = load_spec(FAMILY)
VARIANTS = [v.name for v in FAMILY.variants_for("cuda")]
UNMARKED = ()  # -m "not slow" compiles CUDA in other tests (an exercise, show --ptx); the whole suite compiles every rung
SIZES = [1, 33, 1025, 2**24 + 1, 10**9 + 7]
DTYPES = [torch.float32, torch.float64]
_built: dict = {}


def ops(variant: str, threads: int = 256):
    """The variant's torch.ops namespace, built once per session (the conftest's cache, which the xdist workers share)."""
    key = (variant, threads)
    if key not in _built:
        _built[key] = build(FAMILY, FAMILY.variants[variant], FAMILY.parse_params([f"threads={threads}"]))[0]
    return _built[key]


def test_every_cuda_variant_is_listed():
    assert VARIANTS == ["tree", "first-add", "shuffle", "fast"]
    assert all("sum_cuda.cpp" in FAMILY.variants[v].sources for v in VARIANTS)


@pytest.mark.nvcc
@pytest.mark.parametrize("variant", [v if v in UNMARKED else pytest.param(v, marks=pytest.mark.slow) for v in VARIANTS])
def test_compiles_and_registers_sum(variant):
    """nvcc and the C++ compiler accept the variant, and its library registers the op (no GPU needed)."""
    assert ops(variant).sum._schemas  # raises if the op was not registered


def fits(*nbytes: int) -> bool:
    """Whether these allocations fit in the GPU's free memory, with a margin."""
    free, _ = torch.cuda.mem_get_info()
    return sum(nbytes) < 0.8 * free


def randn(n: int, dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(n, generator=gen, dtype=dtype, device="cuda")


def check_sum(op, x: torch.Tensor, owner: torch.Tensor | None = None):
    """op(x) is a 0-d tensor on x's device, within the tree bound of the float64 sum, and x is unchanged."""
    owner = x if owner is None else owner  # the tensor whose memory x views
    before = owner.clone()
    out = op(x)
    torch.cuda.synchronize()
    assert out.shape == () and out.dtype == x.dtype and out.device == x.device
    ref = x.sum(dtype=torch.float64)
    tol, _ = SPEC.tolerance(x, x.dtype)
    err = (out.double() - ref).abs().item()
    assert err <= tol, f"n={x.numel()}: got {out.item():.17g}, expected {ref.item():.17g} (error {err:.3g} > {tol:.3g})"
    assert torch.equal(owner, before), "the kernel changed its input"


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_sum_matches_float64(variant, n, dtype):
    size = torch.tensor([], dtype=dtype).element_size()
    if not fits(2 * n * size, 8 * n):  # x, its copy, the float64 |x| of the tolerance
        pytest.skip(f"not enough GPU memory for n={n}")
    check_sum(ops(variant).sum, randn(n, dtype, seed=n))


@pytest.mark.cuda
@pytest.mark.parametrize("variant", VARIANTS)
def test_sum_above_2_31_elements(variant):
    """64-bit indexing: 2^31 + 9 float32 elements (8.6 GB)."""
    n = 2**31 + 9
    if not fits(2 * 4 * n, 8 * n):
        pytest.skip("not enough GPU memory for 2^31 + 9 elements")
    check_sum(ops(variant).sum, randn(n, torch.float32, seed=31))


VIEWS = {"x[1:]": lambda b: b[1:], "x[3:]": lambda b: b[3:], "x[::2]": lambda b: b[::2], "x[5::3]": lambda b: b[5::3]}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [34, 1026, 2**24 + 2])
@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_sum_of_a_view(variant, view, n, dtype):
    """Misaligned (16-byte loads must not fault or skip) and strided views (copied first)."""
    base = randn(n, dtype, seed=n + 1)
    check_sum(ops(variant).sum, VIEWS[view](base), owner=base)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("threads", [64, 1024])
@pytest.mark.parametrize("variant", ["tree", "fast"])
def test_other_block_sizes(variant, threads, dtype):
    op = ops(variant, threads).sum
    for n in [1, 1025, 2**24 + 1]:
        check_sum(op, randn(n, dtype, seed=n + threads))
        check_sum(op, randn(n + 1, dtype, seed=n)[1:])


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(0,), (3, 0)])
@pytest.mark.parametrize("variant", VARIANTS)
def test_empty_sum_is_zero(variant, shape):
    for dtype in DTYPES:
        out = ops(variant).sum(torch.empty(*shape, dtype=dtype, device="cuda"))
        assert out.shape == () and out.dtype == dtype and out.item() == 0.0


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (1000, 1025), (4097, 4099)])
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_2d_input_sums_every_element(variant, shape, dtype):
    """numel, not size(0): a 2-D tensor sums to one value, contiguous or as a transposed (copied) view."""
    base = randn(shape[0] * shape[1], dtype, seed=shape[0]).view(*shape)
    check_sum(ops(variant).sum, base)
    check_sum(ops(variant).sum, base.t(), owner=base)


REJECT = """
import torch
from playground.family import registry
from playground.compiler.build import build
family = registry.find("sum")
ops = build(family, family.variants["fast"], family.parse_params([]))[0]
for x in (torch.randn(4), torch.arange(4, device="cuda")):
    try:
        ops.sum(x)
        print("accepted")
    except RuntimeError as e:
        print(str(e).splitlines()[0])
"""


@pytest.mark.cuda
@pytest.mark.xfail(reason="on the H200 box (torch 2.11.0+cu130, 2026-11-29) the int64 call killed the process "
                          "(SIGSEGV) instead of raising: an exception thrown by a stable-ABI CUDA kernel")
def test_rejects_cpu_tensors_and_integers():
    """Bad input is a Python error, not a crash (a child process, so a crash fails only this test)."""
    root = str(Path(__file__).resolve().parent.parent)
    child = subprocess.run([sys.executable, "-c", REJECT], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": root})
    assert child.returncode == 0, f"exit code {child.returncode}: {child.stderr[-2000:]}"
    cpu, integers = child.stdout.strip().splitlines()[-2:]
    assert "CPU" in cpu  # the op has a CUDA kernel only: the dispatcher refuses
    assert "float32 or float64" in integers


@pytest.mark.cuda
def test_fast_is_deterministic():
    """The last block adds the partials in a fixed order: the same input gives the same bits."""
    x = randn(10**7 + 3, torch.float32, seed=7)
    first = ops("fast").sum(x)
    assert all(torch.equal(first, ops("fast").sum(x)) for _ in range(20))

