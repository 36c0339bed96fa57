// WRONG on purpose: like the seed's grid = n / THREADS, it sums whole blocks of 256 and drops the tail.
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

Tensor sum(Tensor x) {
  const float* p = static_cast<const float*>(x.const_data_ptr());
  int64_t whole = x.numel() / 256 * 256;
  double total = 0;
  for (int64_t i = 0; i < whole; ++i) total += p[i];
  Tensor out = torch::stable::new_empty(x, {});
  *static_cast<float*>(out.mutable_data_ptr()) = total;
  return out;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("sum", TORCH_BOX(&sum)); }
