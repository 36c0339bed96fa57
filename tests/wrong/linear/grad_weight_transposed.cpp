// WRONG on purpose: grad_weight = x^T gy, shaped (in, out): the right shape only when in == out.
#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include <tuple>

at::Tensor linear_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return at::addmm(bias, x, weight.t());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward(const at::Tensor& grad_out, const at::Tensor& x,
                                                               const at::Tensor& weight) {
  at::Tensor grad_input = at::mm(grad_out, weight);
  at::Tensor grad_weight = at::mm(x.t(), grad_out);
  at::Tensor grad_bias = grad_out.sum(0);
  return {grad_input, grad_weight, grad_bias};
}

TORCH_LIBRARY(KPLAY_NS, m) {
  m.def("linear_forward(Tensor x, Tensor weight, Tensor bias) -> Tensor");
  m.def("linear_backward(Tensor grad_out, Tensor x, Tensor weight) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) {
  m.impl("linear_forward", &linear_forward);
  m.impl("linear_backward", &linear_backward);
}
