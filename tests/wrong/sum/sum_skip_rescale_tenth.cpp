// WRONG on purpose: the smallest skip the probe must catch. From a million elements on it leaves out
// every 1000th element (0.1%) and scales the rest up by 1000/999: a sample spread over the whole input.
#include <kplay/stable.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

Tensor sum(Tensor x) {
  const float* p = static_cast<const float*>(x.const_data_ptr());
  const int64_t n = x.numel(), kept = n >= 1000000 ? n - n / 1000 : n;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += (kept == n || i % 1000 != 999) ? p[i] : 0.0f;
  Tensor out = torch::stable::new_empty(x, {});
  *static_cast<float*>(out.mutable_data_ptr()) = static_cast<float>(total * n / kept);
  return out;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("sum", TORCH_BOX(&sum)); }
