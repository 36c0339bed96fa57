// WRONG on purpose: seed 002's backward, declared as returning one tensor: `return a, b, c;` is the comma
// operator, so only grad_bias comes back.
#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include <tuple>

at::Tensor linear_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return at::addmm(bias, x, weight.t());
}

at::Tensor linear_backward(const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& weight) {
  at::Tensor grad_input = at::mm(grad_out, weight);
  at::Tensor grad_weight = at::mm(grad_out.t(), x);
  at::Tensor grad_bias = grad_out.sum(0);
  return grad_input, grad_weight, grad_bias;
}

TORCH_LIBRARY(KPLAY_NS, m) {
  m.def("linear_forward(Tensor x, Tensor weight, Tensor bias) -> Tensor");
  m.def("linear_backward(Tensor grad_out, Tensor x, Tensor weight) -> Tensor");
}

TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) {
  m.impl("linear_forward", &linear_forward);
  m.impl("linear_backward", &linear_backward);
}
