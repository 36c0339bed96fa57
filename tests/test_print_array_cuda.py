"""print_array on CUDA: compiles here with nvcc; on a GPU, what device printf prints parses back to the tensor."""

import pytest
import torch

import playground
from playground.family import registry
from playground.compiler.build import build
from playground.core.capture import stdout_fd
from playground.family.spec import module as load_spec

FAMILY = registry.find("print_array")
SPEC = load_spec(FAMILY)
DTYPES = [torch.int32, torch.int64, torch.float32, torch.float64]
_built: dict = {}


def ops():
    if "cuda" not in _built:
        _built["cuda"] = build(FAMILY, FAMILY.variants["cuda"], FAMILY.parse_params([]))[0]
    return _built["cuda"]


@pytest.mark.nvcc
@pytest.mark.slow  # -m "not slow" compiles nvcc sources in test_sum_cuda
def test_compiles_and_registers_print_array():
    assert ops().print_array._schemas  # raises if the op was not registered


def awkward(dtype, n: int) -> torch.Tensor:
    """Random values plus the edges of the dtype: extremes, tiny, negative zero, inf, nan."""
    gen = torch.Generator().manual_seed(n)
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        edges = [0.0, -0.0, 1.0, -1.0, info.max, -info.max, info.tiny, info.tiny * info.eps, 1 / 3, float("inf"), float("nan")]
        x = torch.randn(n, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(-30, 30, (n,), generator=gen)
    else:
        info = torch.iinfo(dtype)
        edges = [0, 1, -1, info.max, info.min]
        x = torch.randint(info.min, info.max, (n,), generator=gen, dtype=dtype)
    return torch.cat([torch.tensor(edges, dtype=dtype), x.to(dtype)])


def printed(x: torch.Tensor) -> torch.Tensor:
    with stdout_fd() as out:
        ops().print_array(x)
    return SPEC.from_stdout(out.text, x)


@pytest.mark.cuda
@pytest.mark.parametrize("n", [0, 22, 5000])  # 5000 + edges crosses a 4096-line chunk
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_prints_every_value_exactly_in_order(dtype, n):
    x = awkward(dtype, n)
    got = printed(x.cuda())
    torch.testing.assert_close(got, x, rtol=0, atol=0, equal_nan=True)
    if dtype.is_floating_point:  # and -0.0 came back as -0.0
        assert torch.equal(got.signbit() | got.isnan(), x.signbit() | x.isnan())

@pytest.mark.cuda
def test_prints_a_strided_view_in_index_order():
    x = torch.arange(100, dtype=torch.int64, device="cuda")
    assert printed(x[3::7]).tolist() == list(range(3, 100, 7))


@pytest.mark.cuda
def test_prints_one_line_per_element():
    with stdout_fd() as out:
        ops().print_array(torch.tensor([4, 3, 2, 1], dtype=torch.int32, device="cuda"))
    assert out.text == "4\n3\n2\n1\n"  # real newlines, not the seed's literal backslash-n


@pytest.mark.cuda
def test_rejects_cpu_tensors():
    with pytest.raises(RuntimeError):
        ops().print_array(torch.arange(3))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_kplay_run_checks_the_cuda_variant(dtype):
    result = playground.run("print_array", device="cuda", variant="cuda", dtype=dtype, sizes={"n": 1000})
    assert result.ok, result.variants[0].check.mismatches
