// The rung after lltm_cuda.cpp: the same cell as one op, `lltm`, built for speed. The tutorial's CUDA version
// (variant cuda) is slower than plain PyTorch on a GPU at its sizes, because host overhead dominates
// (benchmarks/results/lltm-notes.md); each change here removes host work or GPU work:
// - autograd in C++ (a torch::autograd::Function for the Autograd key): a forward or a backward is one call
//   from Python, no Python in between. Its headers cost the build about 10 s, which is why the other
//   variants register autograd from Python.
// - the matmuls go through cuBLASLt, each shape's algorithm chosen once (lt_matmul.h), the forward's as
//   fwd_split partial products (split-K) that its kernel adds with the bias (partial_products says why);
// - X = [old_h, input] comes from a copy kernel of ours (one launch; at::cat spends more host time deciding
//   how): one matmul over X beats two over its blocks, in the forward and more so in the backward;
// - the backward's kernel also sums the bias gradient; its two matmuls may run on two streams;
// - the kernels (lltm_fast.cu) move 16 bytes at a time where the memory allows it.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <string>
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

// Parts of the forward's matmul and of the backward's d_X (params fwd_split and bwd_split; 1 = no split).
constexpr int64_t kForwardParts = {{fwd_split}}, kBackwardParts = {{bwd_split}};

// The host's path to the matmul is kept short, because the GPU waits for it: X first (one launch), the
// matmul next, the rest set up after.
static Forward lltm_forward_cuda(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                                 const Tensor& old_cell) {
  check_inputs(input, weights, bias, old_h, old_cell);
  const c10::cuda::CUDAGuard device(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t batch = old_h.size(0), state = old_h.size(1), features = input.size(1);
  Tensor X = at::empty({batch, state + features}, old_h.options());  // [old_h, input]
  LLTM_DISPATCH(X.scalar_type(), "lltm_cat", lltm_cat_launch<T>(old_h.data_ptr<T>(), old_h.stride(0), old_h.stride(1),
                                                                input.data_ptr<T>(), input.stride(0), input.stride(1),
                                                                X.data_ptr<T>(), batch, state, features, stream));
  // X @ weights^T without the bias, in parts: the kernel adds the parts and the bias (no bias copy first).
  const Tensor products = partial_products(mat(X), mat(weights).transposed(), kForwardParts);
  Tensor gates = at::empty({batch, 3 * state}, X.options());
  Tensor new_h = at::empty({batch, state}, X.options());
  Tensor new_cell = at::empty({batch, state}, X.options());
  const Tensor b = bias.contiguous();
  LLTM_DISPATCH(gates.scalar_type(), "lltm_forward",
                lltm_forward_launch<T>(products.data_ptr<T>(), products.size(0), b.data_ptr<T>(),
                                       old_cell.data_ptr<T>(), old_cell.stride(0), old_cell.stride(1),
                                       gates.data_ptr<T>(), new_h.data_ptr<T>(), new_cell.data_ptr<T>(), batch, state,
                                       stream));
  return {new_h, new_cell, gates, X};
}

// Streams for the backward's two matmuls, which are independent: 1 runs them one after the other; 2 runs
// them side by side, so one can fill the GPU while the other finishes its last wave of tiles.
constexpr int kStreams = {{streams}};

// `waiter` waits for the work queued so far on `from`.
static void wait_for(cudaStream_t waiter, cudaStream_t from) {
  cudaEvent_t event;
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(event, from));
  C10_CUDA_CHECK(cudaStreamWaitEvent(waiter, event, 0));
  C10_CUDA_CHECK(cudaEventDestroy(event));  // freed once the wait is done
}

static Backward lltm_backward_cuda(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                                   const Tensor& gates, const Tensor& X, const Tensor& weights) {
  const int64_t batch = new_cell.size(0), state = new_cell.size(1);
  TORCH_CHECK(gates.is_contiguous() && new_cell.is_contiguous() && gates.sizes() == at::IntArrayRef({batch, 3 * state}),
              "lltm (CUDA): new_cell and gates must come from lltm_forward");
  TORCH_CHECK(grad_h.sizes() == new_cell.sizes() && grad_cell.sizes() == new_cell.sizes(),
              "lltm (CUDA): grad_h and grad_cell must be shaped like new_cell");
  const c10::cuda::CUDAGuard device(gates.device());
  // One kernel: d_gates, d_old_cell and the bias gradient (d_gates summed over the batch).
  Tensor d_gates = at::empty_like(gates), d_old_cell = at::empty_like(new_cell);
  Tensor d_bias = at::empty({3 * state}, gates.options());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  LLTM_DISPATCH(gates.scalar_type(), "lltm_backward",
                lltm_backward_launch<T>(d_gates.data_ptr<T>(), d_old_cell.data_ptr<T>(), d_bias.data_ptr<T>(),
                                        grad_h.data_ptr<T>(), grad_h.stride(0), grad_h.stride(1),
                                        grad_cell.data_ptr<T>(), grad_cell.stride(0), grad_cell.stride(1),
                                        new_cell.data_ptr<T>(), gates.data_ptr<T>(), batch, state, stream));
  // The matmuls: d_weights = d_gates^T @ X and d_X = d_gates @ weights (in kBackwardParts parts, then summed).
  Tensor d_weights = at::empty({3 * state, X.size(1)}, weights.options());
  Tensor d_X = at::empty({batch, X.size(1)}, X.options());
  auto compute_d_X = [&] {
    if (kBackwardParts == 1) {
      matmul_out(d_X, mat(d_gates), mat(weights), 1);
    } else {
      at::sum_out(d_X, partial_products(mat(d_gates), mat(weights), kBackwardParts), /*dim=*/0);
    }
  };
  // kStreams == 2: d_X on a pool stream. Its tensors were allocated above, on the current stream, so the
  // caching allocator cannot hand their memory to other work before the join below.
  const c10::cuda::CUDAStream side = kStreams == 2 ? c10::cuda::getStreamFromPool() : stream;
  if (kStreams == 2) wait_for(side, stream);
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    compute_d_X();
  }
  matmul_out(d_weights, mat(d_gates).transposed(), mat(X), 1);
  if (kStreams == 2) wait_for(stream, side);
  // d_old_h and d_input are d_X's two column blocks; an op's outputs must not share memory, so one is copied.
  return {d_X.narrow(1, state, X.size(1) - state).clone(), d_weights, d_bias, d_X.narrow(1, 0, state), d_old_cell};
}

// ---- The op and its autograd. Python calls `lltm`; its Autograd kernel calls lltm_forward and lltm_backward
// through the dispatcher, so CUDA and fake tensors each find theirs.

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
