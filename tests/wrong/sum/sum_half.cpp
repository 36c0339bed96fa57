// WRONG on purpose: it accumulates in half precision (about 3 decimal digits).
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

Tensor sum(Tensor x) {
  const float* p = static_cast<const float*>(x.const_data_ptr());
  _Float16 total = 0;
  for (int64_t i = 0; i < x.numel(); ++i) total += static_cast<_Float16>(p[i]);
  Tensor out = torch::stable::new_empty(x, {});
  *static_cast<float*>(out.mutable_data_ptr()) = static_cast<float>(total);
  return out;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("sum", TORCH_BOX(&sum)); }
