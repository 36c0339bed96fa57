// WRONG on purpose: remembers the last input's pointer and size and returns the saved answer for them.
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

Tensor sum(Tensor x) {
  static const void* last = nullptr;
  static int64_t last_n = -1;
  static float saved = 0;
  const float* p = static_cast<const float*>(x.const_data_ptr());
  if (p != last || x.numel() != last_n) {
    double total = 0;
    for (int64_t i = 0; i < x.numel(); ++i) total += p[i];
    last = p, last_n = x.numel(), saved = static_cast<float>(total);
  }
  Tensor out = torch::stable::new_empty(x, {});
  *static_cast<float*>(out.mutable_data_ptr()) = saved;
  return out;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("sum", TORCH_BOX(&sum)); }
