// WRONG on purpose: like the seed, it reduces in place and destroys its input.
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

Tensor sum(Tensor x) {
  float* p = static_cast<float*>(x.mutable_data_ptr());
  for (int64_t i = 1; i < x.numel(); ++i) p[0] += p[i];
  Tensor out = torch::stable::new_empty(x, {});
  *static_cast<float*>(out.mutable_data_ptr()) = p[0];
  return out;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("sum", TORCH_BOX(&sum)); }
