"""The CPU sum: right at awkward sizes, input untouched; and the checker fails known-wrong kernels."""

import math

import pytest
import torch

import playground


@pytest.fixture(scope="module")
def ops():
    return playground.load("sum", device="cpu")


@pytest.mark.parametrize("n", [1, 2, 31, 33, 1023, 1024, 1025, 65535, 65537, 1_000_003])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sum_matches_float64_at_awkward_sizes(ops, n, dtype):
    x = torch.randn(n, dtype=dtype, generator=torch.Generator().manual_seed(n))
    before = x.clone()
    got = ops.sum(x)
    bound = (math.ceil(math.log2(n)) + 1 if n > 1 else 1) * torch.finfo(dtype).eps * x.double().abs().sum().item()
    assert got.dim() == 0 and got.dtype == dtype
    assert abs(got.item() - x.double().sum().item()) <= bound
    assert torch.equal(x, before)


def test_sum_of_views(ops):
    x = torch.randn(10_001)
    for view in (x[1:], x[::2], x[3:-5:3]):
        assert ops.sum(view).item() == pytest.approx(view.double().sum().item(), abs=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_empty_sum_is_zero_as_torch_sum_says(ops, dtype):
    for x in (torch.empty(0, dtype=dtype), torch.empty(3, 0, dtype=dtype)):
        got = ops.sum(x)
        assert got.dim() == 0 and got.dtype == dtype and got.item() == 0.0 == torch.sum(x).item()


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (1000, 1025), (7, 65537)])
def test_a_2d_input_sums_every_element(ops, shape):
    x = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(shape[0]))
    for view in (x, x.t()):  # contiguous, and a transposed view (copied)
        got = ops.sum(view)
        assert got.dim() == 0 and got.item() == pytest.approx(view.sum().item(), abs=1e-9 * x.numel())


def test_sum_is_deterministic_across_thread_counts(ops):
    x = torch.randn(1_000_000)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ops.sum(x).item()
    finally:
        torch.set_num_threads(threads)
    assert ops.sum(x).item() == one


def test_api_run_returns_the_record():
    r = playground.run("sum", sizes={"n": 4096}, device="cpu", budget_s=0.05)
    assert r.ok and r.exit_code == 0 and r.variants[0].check.cases[-6:] == [
        "n=4096 randn", *(f"n=4096 randn {form}" for form in ("2-D", "strided", "misaligned")), "n=4096 uniform probed",
        "n=4096 randn reused"]
    assert r.variants[0].time.samples >= 30
