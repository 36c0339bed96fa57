// KERNEL: y = 2·x + 1 on the CPU. Made by `kplay new`; edit it and `kplay run .`
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

template <typename T>
void compute(const T* x, T* y, int64_t n) {
  torch::stable::parallel_for(0, n, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = 2 * x[i] + 1;
  });
}

Tensor KERNEL(Tensor x) {
  STD_TORCH_CHECK(x.is_cpu(), "KERNEL: x must be on the CPU");
  Tensor c = torch::stable::contiguous(x);
  Tensor y = torch::stable::empty_like(c);
  if (c.scalar_type() == ScalarType::Float) {
    compute(static_cast<const float*>(c.const_data_ptr()), static_cast<float*>(y.mutable_data_ptr()), c.numel());
  } else {
    STD_TORCH_CHECK(c.scalar_type() == ScalarType::Double, "KERNEL: expected float32 or float64");
    compute(static_cast<const double*>(c.const_data_ptr()), static_cast<double*>(y.mutable_data_ptr()), c.numel());
  }
  return y;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("KERNEL(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("KERNEL", TORCH_BOX(&KERNEL)); }
