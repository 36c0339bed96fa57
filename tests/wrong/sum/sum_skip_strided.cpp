// WRONG on purpose: a strided skip. Above a million elements it leaves out every 100th element and
// scales the rest up by 100/99: a sample spread over the whole input, not a missing tail.
// (Same arithmetic as the vectorsum cheat, another pattern.)
#include <kplay/stable.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

Tensor sum(Tensor x) {
  const float* p = static_cast<const float*>(x.const_data_ptr());
  const int64_t n = x.numel(), kept = n > 1000000 ? n / 100 * 99 : n;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += (kept == n || i % 100 != 99) ? p[i] : 0.0f;
  Tensor out = torch::stable::new_empty(x, {});
  *static_cast<float*>(out.mutable_data_ptr()) = static_cast<float>(total * n / kept);
  return out;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("sum", TORCH_BOX(&sum)); }
