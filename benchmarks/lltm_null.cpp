// The LLTM cell with no work, for lltm_graph_probe.py's floor: cuda-fast's op and C++ autograd (lltm_op.h,
// included from snippets/lltm), whose forward and backward allocate their outputs and compute nothing. A call
// of it costs what a call of cuda-fast or cuda-graph costs besides their kernels.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <tuple>

using at::Tensor;
using Forward = std::tuple<Tensor, Tensor, Tensor, Tensor>;          // new_h, new_cell, gates, X
using Backward = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;  // d_input, d_weights, d_bias, d_old_h, d_old_cell

static Forward lltm_forward_cuda(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                                 const Tensor& old_cell) {
  const int64_t batch = input.size(0), state = old_h.size(1);
  return {at::empty_like(old_h), at::empty_like(old_cell), at::empty({batch, 3 * state}, input.options()),
          at::empty({batch, state + input.size(1)}, input.options())};
}

static Backward lltm_backward_cuda(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                                   const Tensor& gates, const Tensor& X, const Tensor& weights) {
  const int64_t state = new_cell.size(1);
  return {at::empty({X.size(0), X.size(1) - state}, X.options()), at::empty_like(weights),
          at::empty({weights.size(0)}, weights.options()), at::empty_like(new_cell), at::empty_like(new_cell)};
}

#include "lltm_op.h"

// Also on the CPU, so that the test suite can check it without a GPU.
TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) {
  m.impl("lltm_forward", &lltm_forward_cuda);
  m.impl("lltm_backward", &lltm_backward_cuda);
}
