// The rung after lltm_cuda.cpp: the same cell as one op, `lltm`, built for speed. The tutorial's CUDA version
// (variant cuda) is slower than plain PyTorch on a GPU at its sizes, because host overhead dominates
// (benchmarks/results/2026-12-01-7f29147-h200-lltm-notes.md); each change here removes host work or GPU work:
// - autograd in C++ (a torch::autograd::Function for the Autograd key, lltm_op.h): a forward or a backward
//   is one call from Python, no Python in between. Its headers cost the build about 10 s, which is why the
//   other variants register autograd from Python.
// - the matmuls go through cuBLASLt, each shape's algorithm chosen once (lt_matmul.h), the forward's as
//   fwd_split partial products (split-K) that its kernel adds with the bias (partial_products says why);
// - X = [old_h, input] comes from a copy kernel of ours (one launch; at::cat spends more host time deciding
//   how): one matmul over X beats two over its blocks, in the forward and more so in the backward;
// - the backward's kernel also sums the bias gradient; its two matmuls may run on two streams;
// - the kernels (lltm_fast.cu) move 16 bytes at a time where the memory allows it.
// The work itself is in lltm_fast_ops.h (cuda-graph replays the same); this file allocates and calls it.
#include <cstdint>

// Parts of the forward's matmul and of the backward's d_X (params fwd_split and bwd_split; 1 = no split).
constexpr int64_t kForwardParts = {{fwd_split}}, kBackwardParts = {{bwd_split}};
// Streams for the backward's two matmuls, which are independent: 1 runs them one after the other; 2 runs
// them side by side, so one can fill the GPU while the other finishes its last wave of tiles.
constexpr int kStreams = {{streams}};

#include "lltm_fast_ops.h"

static Forward lltm_forward_cuda(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                                 const Tensor& old_cell) {
  check_inputs(input, weights, bias, old_h, old_cell);
  const c10::cuda::CUDAGuard device(input.device());
  return lltm_forward_work(input, weights, bias, old_h, old_cell);
}

static Backward lltm_backward_cuda(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                                   const Tensor& gates, const Tensor& X, const Tensor& weights) {
  check_backward_inputs(grad_h, grad_cell, new_cell, gates);
  const c10::cuda::CUDAGuard device(gates.device());
  const auto [d_input, d_weights, d_bias, d_X, d_old_cell] =
      lltm_backward_work(grad_h, grad_cell, new_cell, gates, X, weights);
  return {d_input, d_weights, d_bias, d_X.narrow(1, 0, new_cell.size(1)), d_old_cell};
}

#include "lltm_op.h"  // the op `lltm`, its autograd, and the registrations of the two above
