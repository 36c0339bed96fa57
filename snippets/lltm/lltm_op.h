// The op `lltm` and its autograd in C++, shared by cuda-fast (lltm_fast.cpp) and cuda-graph (lltm_graph.cpp).
// Python calls `lltm`; its Autograd kernel calls lltm_forward and lltm_backward through the dispatcher, so
// CUDA and fake tensors each find theirs. The including source defines the CUDA kernels of those two,
// lltm_forward_cuda and lltm_backward_cuda, before it includes this.
#pragma once

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <string>
#include <tuple>

// The op `name` of this library, typed like the function F that implements it.
template <typename F>
static auto typed_op(const char* name) {
  const std::string qualified = std::string(C10_STRINGIZE(KPLAY_NS) "::") + name;
  return c10::Dispatcher::singleton().findSchemaOrThrow(qualified.c_str(), "").typed<F>();
}

static Forward lltm_forward(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                            const Tensor& old_cell) {
  static auto op = typed_op<decltype(lltm_forward_cuda)>("lltm_forward");
  return op.call(input, weights, bias, old_h, old_cell);
}

static Backward lltm_backward(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                              const Tensor& gates, const Tensor& X, const Tensor& weights) {
  static auto op = typed_op<decltype(lltm_backward_cuda)>("lltm_backward");
  return op.call(grad_h, grad_cell, new_cell, gates, X, weights);
}

// The tutorial's LLTMFunction, in C++.
struct LLTMFunction : public torch::autograd::Function<LLTMFunction> {
  using Variables = torch::autograd::variable_list;

  static Variables forward(torch::autograd::AutogradContext* ctx, const Tensor& input, const Tensor& weights,
                           const Tensor& bias, const Tensor& old_h, const Tensor& old_cell) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // the device kernel next, not this one again
    auto [new_h, new_cell, gates, X] = lltm_forward(input, weights, bias, old_h, old_cell);
    ctx->save_for_backward({new_cell, gates, X, weights});
    return {new_h, new_cell};
  }

  static Variables backward(torch::autograd::AutogradContext* ctx, Variables grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& new_cell = saved[0];
    // An output the loss did not use has no gradient: a zero broadcast to its shape (stride 0, no copy).
    for (Tensor& g : grads) {
      if (!g.defined()) g = at::zeros({}, new_cell.options()).expand_as(new_cell);
    }
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [d_input, d_weights, d_bias, d_old_h, d_old_cell] =
        lltm_backward(grads[0], grads[1], new_cell, saved[1], saved[2], saved[3]);
    return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
  }
};

static std::tuple<Tensor, Tensor> lltm_autograd(const Tensor& input, const Tensor& weights, const Tensor& bias,
                                                const Tensor& old_h, const Tensor& old_cell) {
  auto out = LLTMFunction::apply(input, weights, bias, old_h, old_cell);
  return {out[0], out[1]};
}

// Below autograd (inference mode, graphs traced by torch.compile) lltm is just the forward.
static std::tuple<Tensor, Tensor> lltm_inference(const Tensor& input, const Tensor& weights, const Tensor& bias,
                                                 const Tensor& old_h, const Tensor& old_cell) {
  auto [new_h, new_cell, gates, X] = lltm_forward(input, weights, bias, old_h, old_cell);
  return {new_h, new_cell};
}

TORCH_LIBRARY(KPLAY_NS, m) {
  m.def("lltm(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell) -> (Tensor, Tensor)");
  // gates: (batch, 3*state), the activated input gate, output gate and candidate cell; X = [old_h, input].
  m.def("lltm_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell)"
        " -> (Tensor new_h, Tensor new_cell, Tensor gates, Tensor X)");
  m.def("lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates, Tensor X, Tensor weights)"
        " -> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_old_h, Tensor d_old_cell)");
}

TORCH_LIBRARY_IMPL(KPLAY_NS, Autograd, m) { m.impl("lltm", &lltm_autograd); }
TORCH_LIBRARY_IMPL(KPLAY_NS, CompositeExplicitAutograd, m) { m.impl("lltm", &lltm_inference); }

TORCH_LIBRARY_IMPL(KPLAY_NS, CUDA, m) {
  m.impl("lltm_forward", &lltm_forward_cuda);
  m.impl("lltm_backward", &lltm_backward_cuda);
}
