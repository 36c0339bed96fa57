// The binding of a kernel that faults: the fault surfaces at the next synchronize.
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

using torch::stable::Tensor;

void launch_wild_write(float* out);

Tensor sum(Tensor x) {
  Tensor out = torch::stable::new_empty(x, {});
  launch_wild_write(static_cast<float*>(out.mutable_data_ptr()));
  return out;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CUDA, m) { m.impl("sum", TORCH_BOX(&sum)); }
