// The tutorial's lltm.cpp: the LLTM cell's forward in ATen ops, and its backward written by hand.
// On a CPU tensor ATen runs its CPU kernels, on a CUDA tensor its CUDA kernels: one source, both devices.
// Where this differs from the tutorial, and why:
// - TORCH_LIBRARY instead of PYBIND11_MODULE: the functions become PyTorch ops (torch.ops.<ns>.lltm_forward),
//   which torch.compile and torch.library.opcheck understand. Autograd stays in Python, the tutorial's
//   LLTMFunction (spec.py): the C++ then needs no autograd headers.
// - only the ATen headers used, not torch/extension.h (ATen, pybind11 and the whole C++ API): the cold
//   build takes seconds instead of half a minute.
// - the forward applies the activations in place in one gates buffer and returns (new_h, new_cell, gates,
//   X): the backward needs only the activations, so there are four outputs instead of seven.
// - d_sigmoid, d_tanh and d_elu are ATen's own derivative kernels (the ones autograd calls), one kernel
//   each where the tutorial's helpers take several ops, computed from the activations kept.
// - the inputs are checked (shapes, dtypes, devices), and the backward returns the gradients in the order
//   of the forward's inputs, as autograd takes them (the tutorial's list starts with d_old_h); d_old_h and
//   d_input are the two column blocks of d_X, and one is copied, since an op's outputs must not share memory.
#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/elu.h>
#include <ATen/ops/elu_backward.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sigmoid_backward.h>
#include <ATen/ops/tanh_backward.h>
#include <torch/library.h>

#include <tuple>

#include "check_inputs.h"  // shapes, dtypes, devices: shared with the CUDA variants

using at::Tensor;

// gates = X @ weights^T + bias, in three column blocks (input gate, output gate, candidate cell), where
// X = [old_h, input]. Returns new_h, new_cell, the activated gates and X: what the backward needs.
std::tuple<Tensor, Tensor, Tensor, Tensor> lltm_forward(const Tensor& input, const Tensor& weights,
                                                        const Tensor& bias, const Tensor& old_h,
                                                        const Tensor& old_cell) {
  check_inputs(input, weights, bias, old_h, old_cell);
  Tensor X = at::cat({old_h, input}, /*dim=*/1);
  Tensor gates = at::addmm(bias, X, weights.t());
  auto g = gates.chunk(3, /*dim=*/1);
  g[0].sigmoid_();  // input gate
  g[1].sigmoid_();  // output gate
  at::elu_(g[2]);   // candidate cell: an ELU where an LSTM has tanh
  Tensor new_cell = old_cell.addcmul(g[2], g[0]);  // old_cell + candidate_cell * input_gate
  Tensor new_h = new_cell.tanh().mul_(g[1]);
  return {new_h, new_cell, gates, X};
}

// From the activations kept: sigmoid'(z) = s (1 - s), tanh'(z) = 1 - t^2, elu'(z) = 1 if z > 0 else
// elu(z) + 1. Returns the gradients of the forward's five inputs, in their order.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> lltm_backward(const Tensor& grad_h, const Tensor& grad_cell,
                                                                 const Tensor& new_cell, const Tensor& gates,
                                                                 const Tensor& X, const Tensor& weights) {
  const int64_t state = new_cell.size(1);
  auto g = gates.chunk(3, /*dim=*/1);  // input_gate, output_gate, candidate_cell
  const Tensor tanh_cell = new_cell.tanh();
  // kplay:todo d_new_cell = tanh'(new_cell) * grad_h * output gate + grad_cell.
  // kplay:why new_h = tanh(new_cell) * output gate, and new_cell is also an output itself: the gradients of
  // kplay:why the two paths add. at::tanh_backward(g, t) is g * (1 - t^2), from the activation t kept.
  // kplay:code const Tensor d_new_cell = at::tanh_backward(grad_h.mul(g[1]), tanh_cell);  // + grad_cell
  const Tensor d_new_cell = at::tanh_backward(grad_h.mul(g[1]), tanh_cell).add_(grad_cell);  // = d_old_cell
  // kplay:stub
  // const Tensor d_new_cell = grad_cell.mul(0);
  // kplay:end

  Tensor d_gates = at::empty_like(gates);
  auto d = d_gates.chunk(3, /*dim=*/1);
  // kplay:todo Each gate's gradient into d[0], d[1], d[2]: at::sigmoid_backward_out twice, then at::elu_backward_out.
  // kplay:why new_cell = old_cell + candidate * input gate, new_h = tanh(new_cell) * output gate: the input
  // kplay:why gate gets d_new_cell * candidate, the output gate grad_h * tanh(new_cell), the candidate
  // kplay:why d_new_cell * input gate, each times its activation's derivative (is_result: from the output).
  at::sigmoid_backward_out(d[0], d_new_cell.mul(g[2]), g[0]);  // input gate
  at::sigmoid_backward_out(d[1], grad_h.mul(tanh_cell), g[1]);  // output gate
  at::elu_backward_out(d[2], d_new_cell.mul(g[0]), /*alpha=*/1, /*scale=*/1, /*input_scale=*/1,
                       /*is_result=*/true, g[2]);
  // kplay:stub
  // d_gates.zero_();
  // kplay:end

  // kplay:todo Through gates = X weights^T + bias: d_weights = d_gates^T X, d_bias, d_X = d_gates weights.
  // kplay:why A linear layer's three gradients; d_bias is d_gates summed over the batch, shaped like bias
  // kplay:why (the tutorial's keepdim=true adds a dimension).
  Tensor d_weights = d_gates.t().mm(X);
  Tensor d_bias = d_gates.sum(/*dim=*/0);
  Tensor d_X = d_gates.mm(weights);
  // kplay:stub
  // Tensor d_weights = weights.mul(0);
  // Tensor d_bias = weights.new_zeros({weights.size(0)});
  // Tensor d_X = X.mul(0);
  // kplay:end
  Tensor d_old_h = d_X.narrow(/*dim=*/1, 0, state);
  Tensor d_input = d_X.narrow(/*dim=*/1, state, X.size(1) - state).clone();
  return {d_input, d_weights, d_bias, d_old_h, d_new_cell};
}

TORCH_LIBRARY(KPLAY_NS, m) {
  m.def("lltm_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell)"
        " -> (Tensor new_h, Tensor new_cell, Tensor gates, Tensor X)");
  m.def("lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates, Tensor X, Tensor weights)"
        " -> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_old_h, Tensor d_old_cell)");
}

// The same kernels for CPU and CUDA tensors: ATen picks the device's kernel inside each op.
TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) {
  m.impl("lltm_forward", &lltm_forward);
  m.impl("lltm_backward", &lltm_backward);
}

TORCH_LIBRARY_IMPL(KPLAY_NS, CUDA, m) {
  m.impl("lltm_forward", &lltm_forward);
  m.impl("lltm_backward", &lltm_backward);
}
