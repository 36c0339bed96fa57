// The cell's GPU work, each output allocated as the work reaches it: cuda-fast (lltm_fast.cpp) runs it once per
// call; cuda-graph (lltm_graph.cpp) records it once into a CUDA graph and replays it. The including source
// defines kForwardParts, kBackwardParts and kStreams (its parameters) before it includes this.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>

#include <tuple>

#include "check_inputs.h"  // shapes, dtypes, devices: shared with lltm.cpp and lltm_cuda.cpp
#include "lltm_fast.h"
#include "lt_matmul.h"

using at::Tensor;
using Forward = std::tuple<Tensor, Tensor, Tensor, Tensor>;          // new_h, new_cell, gates, X
using Backward = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;  // d_input, d_weights, d_bias, d_old_h, d_old_cell

#define CHECK_LAUNCH(call)                                                      \
  do {                                                                          \
    const cudaError_t err = (call);                                             \
    TORCH_CHECK(err == cudaSuccess, "lltm (CUDA): ", cudaGetErrorString(err));  \
  } while (0)

// The tutorial's AT_DISPATCH_FLOATING_TYPES around a launch: T is float or double; the launch's error is checked.
#define LLTM_DISPATCH(dtype, name, call) \
  AT_DISPATCH_FLOATING_TYPES(dtype, name, [&] { using T = scalar_t; CHECK_LAUNCH(call); })

// The forward: X (one copy kernel), the matmul in kForwardParts partial products (split-K), and the kernel
// that adds the parts and the bias and applies the gates; returns new_h, new_cell, gates (batch, 3*state)
// and X = [old_h, input]. Each output is allocated where it is first needed: the host's path to the matmul
// is kept short, because the GPU waits for it.
inline Forward lltm_forward_work(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                                 const Tensor& old_cell) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t batch = old_h.size(0), state = old_h.size(1), features = input.size(1);
  const Tensor X = at::empty({batch, state + features}, old_h.options());
  LLTM_DISPATCH(X.scalar_type(), "lltm_cat", lltm_cat_launch<T>(old_h.data_ptr<T>(), old_h.stride(0), old_h.stride(1),
                                                                input.data_ptr<T>(), input.stride(0), input.stride(1),
                                                                X.data_ptr<T>(), batch, state, features, stream));
  // X @ weights^T without the bias, in parts: the kernel adds the parts and the bias (no bias copy first).
  const Tensor products = partial_products(mat(X), mat(weights).transposed(), kForwardParts);
  const Tensor gates = at::empty({batch, 3 * state}, X.options());
  const Tensor new_h = at::empty({batch, state}, X.options()), new_cell = at::empty({batch, state}, X.options());
  const Tensor b = bias.contiguous();
  LLTM_DISPATCH(gates.scalar_type(), "lltm_forward",
                lltm_forward_launch<T>(products.data_ptr<T>(), products.size(0), b.data_ptr<T>(),
                                       old_cell.data_ptr<T>(), old_cell.stride(0), old_cell.stride(1),
                                       gates.data_ptr<T>(), new_h.data_ptr<T>(), new_cell.data_ptr<T>(), batch, state,
                                       stream));
  return {new_h, new_cell, gates, X};
}

// `waiter` waits for the work queued so far on `from`.
inline void wait_for(cudaStream_t waiter, cudaStream_t from) {
  cudaEvent_t event;
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(event, from));
  C10_CUDA_CHECK(cudaStreamWaitEvent(waiter, event, 0));
  C10_CUDA_CHECK(cudaEventDestroy(event));  // freed once the wait is done
}

// The backward's outputs: d_input, d_weights, d_bias, d_X (d_old_h is its first `state` columns) and d_old_cell.
using BackwardOut = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;

inline void check_backward_inputs(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                                  const Tensor& gates) {
  const int64_t batch = new_cell.size(0), state = new_cell.size(1);
  TORCH_CHECK(gates.is_contiguous() && new_cell.is_contiguous() && gates.sizes() == at::IntArrayRef({batch, 3 * state}),
              "lltm (CUDA): new_cell and gates must come from lltm_forward");
  TORCH_CHECK(grad_h.sizes() == new_cell.sizes() && grad_cell.sizes() == new_cell.sizes(),
              "lltm (CUDA): grad_h and grad_cell must be shaped like new_cell");
}

// The backward, each output allocated where first needed: one kernel makes d_gates, d_old_cell and the bias
// gradient (d_gates summed over the batch); then the two matmuls, d_weights = d_gates^T @ X and d_X = d_gates
// @ weights (in kBackwardParts parts, then summed), on kStreams streams; then d_input, copied out of d_X.
inline BackwardOut lltm_backward_work(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                                      const Tensor& gates, const Tensor& X, const Tensor& weights) {
  const int64_t batch = new_cell.size(0), state = new_cell.size(1);
  const Tensor d_gates = at::empty_like(gates);
  const Tensor d_old_cell = at::empty_like(new_cell), d_bias = at::empty({3 * state}, gates.options());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  LLTM_DISPATCH(gates.scalar_type(), "lltm_backward",
                lltm_backward_launch<T>(d_gates.data_ptr<T>(), d_old_cell.data_ptr<T>(), d_bias.data_ptr<T>(),
                                        grad_h.data_ptr<T>(), grad_h.stride(0), grad_h.stride(1),
                                        grad_cell.data_ptr<T>(), grad_cell.stride(0), grad_cell.stride(1),
                                        new_cell.data_ptr<T>(), gates.data_ptr<T>(), batch, state, stream));
  Tensor d_weights = at::empty({3 * state, X.size(1)}, weights.options());
  Tensor d_X = at::empty({batch, X.size(1)}, X.options());
  auto compute_d_X = [&] {
    if (kBackwardParts == 1) {
      matmul_out(d_X, mat(d_gates), mat(weights), 1);
    } else {
      at::sum_out(d_X, partial_products(mat(d_gates), mat(weights), kBackwardParts), /*dim=*/0);
    }
  };
  // kStreams == 2: d_X on a pool stream. Its tensors were allocated on the current stream, so the caching
  // allocator cannot hand their memory to other work before the join below.
  const c10::cuda::CUDAStream side = kStreams == 2 ? c10::cuda::getStreamFromPool() : stream;
  if (kStreams == 2) wait_for(side, stream);
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    compute_d_X();
  }
  matmul_out(d_weights, mat(d_gates).transposed(), mat(X), 1);
  if (kStreams == 2) wait_for(stream, side);
  // d_old_h and d_input are d_X's two column blocks; an op's outputs must not share memory, so one is copied.
  return {d_X.narrow(1, state, X.size(1) - state).clone(), d_weights, d_bias, d_X, d_old_cell};
}
