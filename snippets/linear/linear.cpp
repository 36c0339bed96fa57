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
  // kplay:todo grad_input = grad_out W: at::mm of (batch, out) and (out, in), shaped like x.
  // kplay:why y[i][j] = sum over k of x[i][k] W[j][k] + b[j]: x[i][k] reaches every y[i][j] through W[j][k], so
  // kplay:why its gradient sums grad_out[i][j] W[j][k] over j, a row of grad_out times W.
  at::Tensor grad_input = at::mm(grad_out, weight);  // (batch, out) x (out, in)
  // kplay:stub
  // at::Tensor grad_input = x.new_zeros(x.sizes());
  // kplay:end
  // kplay:todo grad_weight = grad_out^T x: at::mm of (out, batch) and (batch, in), shaped like weight.
  // kplay:why W[j][k] multiplies x[i][k] into y[i][j] for every row i of the batch: its gradient adds
  // kplay:why grad_out[i][j] x[i][k] over i, which is the product over the batch.
  at::Tensor grad_weight = at::mm(grad_out.t(), x);  // (out, batch) x (batch, in)
  // kplay:stub
  // at::Tensor grad_weight = weight.new_zeros(weight.sizes());
  // kplay:end
  // kplay:todo grad_bias = grad_out summed over the batch (dim 0): one value per output feature.
  // kplay:why b[j] is added to y[i][j] in every row i, so each row's gradient adds to it.
  at::Tensor grad_bias = grad_out.sum(0);
  // kplay:stub
  // at::Tensor grad_bias = weight.new_zeros({weight.size(0)});
  // kplay:end
  // The post wrote `return grad_input, grad_weight, grad_bias;`: the comma operator keeps only grad_bias.
  return {grad_input, grad_weight, grad_bias};
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
