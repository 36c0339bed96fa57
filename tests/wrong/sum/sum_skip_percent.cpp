// WRONG on purpose: the `vectorsum` cheat (gpu-mode/reference-kernels, solutions/wrong/cheat.py). Above a
// million elements it sums the first 99% and scales the result up by 1/0.99: on random data the answer
// is close, and a worst-case rounding bound that grows like n log n can let it pass.
#include <kplay/stable.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

Tensor sum(Tensor x) {
  const float* p = static_cast<const float*>(x.const_data_ptr());
  const int64_t n = x.numel(), kept = n > 1000000 ? n / 100 * 99 : n;
  double total = 0;
  for (int64_t i = 0; i < kept; ++i) total += p[i];
  Tensor out = torch::stable::new_empty(x, {});
  *static_cast<float*>(out.mutable_data_ptr()) = static_cast<float>(total * n / kept);
  return out;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("sum", TORCH_BOX(&sum)); }
