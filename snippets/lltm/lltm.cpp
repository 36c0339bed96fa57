// The LLTM cell as one PyTorch op with a C++ backward: the tutorial's lltm.cpp (ATen) and lltm_cuda.cpp
// (built with -DLLTM_CUDA, next to lltm.cu) in one file, because both variants share the op and its autograd.
// Differences from the tutorial, each for speed (its Python autograd.Function is slower than plain PyTorch
// on a GPU: host overhead dominates, DESIGN.md):
// - autograd lives in C++ (torch::autograd::Function registered for the Autograd key): a forward or a
//   backward is one call from Python, with no Python in between;
// - the gate buffer keeps the activations, which is all the backward needs: fewer tensors;
// - (cuda) the forward's matmul runs as four partial products (split-K) that the kernel adds: cuBLAS
//   then picks a faster kernel for it (partial_products says more);
// - no torch/extension.h, only the headers used: the build takes seconds, not half a minute.
// X = cat([old_h, input]) stays (on a GPU a copy kernel of ours builds it): one matmul over X beats two over
// its blocks, in the forward and more so in the backward (one matmul each for d_weights and d_X, not two).
#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/elu.h>
#include <ATen/ops/elu_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sigmoid_backward.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tanh_backward.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>

using at::Tensor;
using Forward = std::tuple<Tensor, Tensor, Tensor, Tensor>;          // new_h, new_cell, gates, X
using Backward = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;  // d_input, d_weights, d_bias, d_old_h, d_old_cell

static void check_inputs(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                         const Tensor& old_cell) {
  TORCH_CHECK(input.dim() == 2 && old_h.dim() == 2 && old_cell.dim() == 2 && weights.dim() == 2 && bias.dim() == 1,
              "lltm: input, old_h, old_cell and weights must be 2-D, bias 1-D");
  const int64_t batch = old_h.size(0), state = old_h.size(1), features = input.size(1);
  TORCH_CHECK(input.size(0) == batch && old_cell.size(0) == batch && old_cell.size(1) == state,
              "lltm: input (batch, features), old_h and old_cell (batch, state) disagree");
  TORCH_CHECK(weights.size(0) == 3 * state && weights.size(1) == state + features && bias.size(0) == 3 * state,
              "lltm: weights must be (3*state, state+features) and bias (3*state)");
  for (const Tensor* t : {&weights, &bias, &old_h, &old_cell}) {
    TORCH_CHECK(t->scalar_type() == input.scalar_type() && t->device() == input.device(),
                "lltm: all tensors must share input's dtype and device");
  }
}

// ---------------------------------------------------------------------------------------------------------
// Forward and backward in ATen (variant cpp; on a GPU this is the tutorial's "C++/ATen on CUDA" step).

// gates = X @ weights^T + bias, chunked into (input gate, output gate, candidate cell), X = [old_h, input].
Forward lltm_forward_aten(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                          const Tensor& old_cell) {
  check_inputs(input, weights, bias, old_h, old_cell);
  Tensor X = at::cat({old_h, input}, /*dim=*/1);
  Tensor gates = at::addmm(bias, X, weights.t());
  auto g = gates.chunk(3, /*dim=*/1);
  g[0].sigmoid_();  // input gate
  g[1].sigmoid_();  // output gate
  at::elu_(g[2]);   // candidate cell: an ELU instead of the LSTM's tanh
  Tensor new_cell = old_cell.addcmul(g[2], g[0]);  // old_cell + candidate_cell * input_gate
  Tensor new_h = new_cell.tanh().mul_(g[1]);
  return {new_h, new_cell, gates, X};
}

// The tutorial writes d_sigmoid, d_tanh and d_elu with several ATen ops each; ATen has each as one kernel
// (the ones autograd itself calls), taking the activation's output, which the forward kept:
// sigmoid'(z) = s (1 - s), tanh'(z) = 1 - t^2, elu'(z) = 1 if z > 0 else exp(z) = elu(z) + 1.
Backward lltm_backward_aten(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                            const Tensor& gates, const Tensor& X, const Tensor& weights) {
  const int64_t state = new_cell.size(1);
  auto g = gates.chunk(3, /*dim=*/1);  // input_gate, output_gate, candidate_cell
  const Tensor tanh_cell = new_cell.tanh();
  const Tensor d_new_cell = at::tanh_backward(grad_h.mul(g[1]), tanh_cell).add_(grad_cell);  // = d_old_cell

  Tensor d_gates = at::empty_like(gates);
  auto d = d_gates.chunk(3, /*dim=*/1);
  at::sigmoid_backward_out(d[0], d_new_cell.mul(g[2]), g[0]);  // input gate
  at::sigmoid_backward_out(d[1], grad_h.mul(tanh_cell), g[1]);  // output gate
  at::elu_backward_out(d[2], d_new_cell.mul(g[0]), /*alpha=*/1, /*scale=*/1, /*input_scale=*/1, /*is_result=*/true, g[2]);

  Tensor d_weights = d_gates.t().mm(X);
  Tensor d_X = d_gates.mm(weights);
  // d_old_h and d_input are d_X's two column blocks; an op's outputs must not share memory, so one is copied.
  return {d_X.narrow(1, state, X.size(1) - state).clone(), d_weights, d_gates.sum(/*dim=*/0),
          d_X.narrow(1, 0, state), d_new_cell};
}

#ifdef LLTM_CUDA
// ---------------------------------------------------------------------------------------------------------
// Forward and backward around the fused kernels of lltm.cu (variant cuda). The matmuls stay in ATen
// (cuBLAS); everything pointwise is one kernel per direction.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

// Defined in lltm.cu, which includes no torch header: raw pointers, strides for the tensors we do not
// allocate ourselves (autograd hands the backward broadcast gradients, stride 0), and the stream.
// Each returns the launch's error.
template <typename T>
cudaError_t lltm_cat_launch(const T* old_h, int64_t old_h_s0, int64_t old_h_s1, const T* input, int64_t input_s0,
                            int64_t input_s1, T* X, int64_t batch, int64_t state, int64_t features, cudaStream_t stream);
template <typename T>
cudaError_t lltm_forward_launch(const T* products, int64_t parts, const T* bias, const T* old_cell, int64_t old_cell_s0,
                                int64_t old_cell_s1, T* gates, T* new_h, T* new_cell, int64_t batch, int64_t state,
                                cudaStream_t stream);
template <typename T>
cudaError_t lltm_backward_launch(T* d_gates, T* d_old_cell, T* d_bias, const T* grad_h, int64_t grad_h_s0,
                                 int64_t grad_h_s1, const T* grad_cell, int64_t grad_cell_s0, int64_t grad_cell_s1,
                                 const T* new_cell, const T* gates, int64_t batch, int64_t state, cudaStream_t stream);

// The tutorial dispatches with AT_DISPATCH_FLOATING_TYPES; two types need no macro (nor its header).
#define LLTM_DISPATCH(dtype, call)                                                    \
  do {                                                                                \
    cudaError_t err;                                                                  \
    if ((dtype) == at::kFloat) {                                                      \
      using T = float;                                                                \
      err = call;                                                                     \
    } else {                                                                          \
      TORCH_CHECK((dtype) == at::kDouble, "lltm (CUDA): float32 or float64 only");   \
      using T = double;                                                               \
      err = call;                                                                     \
    }                                                                                 \
    TORCH_CHECK(err == cudaSuccess, "lltm (CUDA): ", cudaGetErrorString(err));        \
  } while (0)

// Split-K: a @ b as `parts` partial products (parts, m, n), the sum over k cut into equal slices, all in one
// batched cuBLAS call (the slices are strided views: no copy); one part (a plain matmul) when k does not
// divide. Why: cuBLAS picks its kernel from the shape, and for the large forward, (1024 x 1536) @ (1536 x 3072),
// it picks one of 64 x 64 tiles (255 us on an H200); four (1024 x 384) @ (384 x 3072) products get 128 x 128
// tiles and take 207 us, all four together. The kernel then reads four partial products instead of one
// (20 us instead of 10): about 40 us less per forward. The same trick does not pay for the backward's d_X
// (211 us as one matmul, 241 to 274 in parts before the sum).
static Tensor partial_products(const Tensor& a, const Tensor& b, int64_t parts) {
  const int64_t k = a.size(1);
  if (parts <= 1 || k % parts != 0) return at::mm(a, b).unsqueeze(0);
  // Part p is a[:, p*s:(p+1)*s] @ b[p*s:(p+1)*s, :], s = k / parts: the same memory, with a part stride.
  const int64_t s = k / parts;
  return at::bmm(a.as_strided({parts, a.size(0), s}, {s * a.stride(1), a.stride(0), a.stride(1)}),
                 b.as_strided({parts, s, b.size(1)}, {s * b.stride(0), b.stride(0), b.stride(1)}));
}

// Parts of the forward's matmul and of the backward's d_X (params fwd_split and bwd_split; 1 = no split).
constexpr int64_t kForwardParts = {{fwd_split}}, kBackwardParts = {{bwd_split}};

// The host's path to the matmul is kept short, because the GPU waits for it: every microsecond between
// the call and the matmul's launch is a microsecond of an idle GPU. So X is copied by a kernel of ours (one
// launch, where at::cat does much more work on the host to decide how), and the rest is set up after.
Forward lltm_forward_cuda(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                          const Tensor& old_cell) {
  check_inputs(input, weights, bias, old_h, old_cell);
  const c10::cuda::CUDAGuard device(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t batch = old_h.size(0), state = old_h.size(1), features = input.size(1);
  Tensor X = at::empty({batch, state + features}, old_h.options());  // [old_h, input]
  LLTM_DISPATCH(X.scalar_type(), lltm_cat_launch<T>(old_h.data_ptr<T>(), old_h.stride(0), old_h.stride(1),
                                                    input.data_ptr<T>(), input.stride(0), input.stride(1),
                                                    X.data_ptr<T>(), batch, state, features, stream));
  // X @ weights^T without the bias, in parts: the kernel adds the parts and the bias (no bias copy first).
  const Tensor products = partial_products(X, weights.t(), kForwardParts);
  Tensor gates = at::empty({batch, 3 * state}, X.options());
  Tensor new_h = at::empty({batch, state}, X.options());
  Tensor new_cell = at::empty({batch, state}, X.options());
  const Tensor b = bias.contiguous();
  TORCH_CHECK(products.is_contiguous(), "lltm (CUDA): the kernel reads the partial products as (parts, batch, 3*state)");
  LLTM_DISPATCH(gates.scalar_type(),
                lltm_forward_launch<T>(products.data_ptr<T>(), products.size(0), b.data_ptr<T>(), old_cell.data_ptr<T>(),
                                       old_cell.stride(0), old_cell.stride(1), gates.data_ptr<T>(), new_h.data_ptr<T>(),
                                       new_cell.data_ptr<T>(), batch, state, stream));
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

Backward lltm_backward_cuda(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                            const Tensor& gates, const Tensor& X, const Tensor& weights) {
  TORCH_CHECK(gates.is_contiguous() && new_cell.is_contiguous(), "lltm (CUDA): gates and new_cell come from lltm_forward");
  const c10::cuda::CUDAGuard device(gates.device());
  const int64_t batch = new_cell.size(0), state = new_cell.size(1);
  // One kernel: d_gates, d_old_cell and the bias gradient (d_gates summed over the batch).
  Tensor d_gates = at::empty_like(gates), d_old_cell = at::empty_like(new_cell);
  Tensor d_bias = at::empty({3 * state}, gates.options());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  LLTM_DISPATCH(gates.scalar_type(),
                lltm_backward_launch<T>(d_gates.data_ptr<T>(), d_old_cell.data_ptr<T>(), d_bias.data_ptr<T>(),
                                        grad_h.data_ptr<T>(), grad_h.stride(0), grad_h.stride(1), grad_cell.data_ptr<T>(),
                                        grad_cell.stride(0), grad_cell.stride(1), new_cell.data_ptr<T>(),
                                        gates.data_ptr<T>(), batch, state, stream));
  // The matmuls: d_weights = d_gates^T @ X and d_X = d_gates @ weights (in kBackwardParts parts, then summed).
  Tensor d_weights = at::empty({3 * state, X.size(1)}, weights.options());
  Tensor d_X = at::empty({batch, X.size(1)}, X.options());
  auto compute_d_X = [&] {
    if (kBackwardParts == 1) {
      at::mm_out(d_X, d_gates, weights);
    } else {
      at::sum_out(d_X, partial_products(d_gates, weights, kBackwardParts), /*dim=*/0);
    }
  };
  if constexpr (kStreams == 2) {
    // d_X on a pool stream. Its tensors were allocated above, on the current stream, so the caching
    // allocator cannot hand their memory to other work before the join below.
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    wait_for(side, stream);
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      compute_d_X();
    }
    at::mm_out(d_weights, d_gates.t(), X);
    wait_for(stream, side);
  } else {
    compute_d_X();
    at::mm_out(d_weights, d_gates.t(), X);
  }
  // d_old_h and d_input are d_X's two column blocks; an op's outputs must not share memory, so one is copied.
  return {d_X.narrow(1, state, X.size(1) - state).clone(), d_weights, d_bias, d_X.narrow(1, 0, state), d_old_cell};
}
#endif  // LLTM_CUDA

// ---------------------------------------------------------------------------------------------------------
// The op and its autograd. Python calls `lltm`; its Autograd kernel calls the device kernels lltm_forward
// and lltm_backward through the dispatcher, so CPU, CUDA and fake tensors each find theirs.

static Forward lltm_forward(const Tensor& input, const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                            const Tensor& old_cell) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow(C10_STRINGIZE(KPLAY_NS) "::lltm_forward", "")
                       .typed<Forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&)>();
  return op.call(input, weights, bias, old_h, old_cell);
}

static Backward lltm_backward(const Tensor& grad_h, const Tensor& grad_cell, const Tensor& new_cell,
                              const Tensor& gates, const Tensor& X, const Tensor& weights) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow(C10_STRINGIZE(KPLAY_NS) "::lltm_backward", "")
                       .typed<Backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&)>();
  return op.call(grad_h, grad_cell, new_cell, gates, X, weights);
}

// The tutorial's LLTMFunction, in C++.
struct LLTMFunction : public torch::autograd::Function<LLTMFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& input,
                                                const Tensor& weights, const Tensor& bias, const Tensor& old_h,
                                                const Tensor& old_cell) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // the device kernel next, not this one again
    auto [new_h, new_cell, gates, X] = lltm_forward(input, weights, bias, old_h, old_cell);
    ctx->save_for_backward({new_cell, gates, X, weights});
    return {new_h, new_cell};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
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

TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) {
  m.impl("lltm_forward", &lltm_forward_aten);
  m.impl("lltm_backward", &lltm_backward_aten);
}

TORCH_LIBRARY_IMPL(KPLAY_NS, CUDA, m) {
#ifdef LLTM_CUDA
  m.impl("lltm_forward", &lltm_forward_cuda);
  m.impl("lltm_backward", &lltm_backward_cuda);
#else
  m.impl("lltm_forward", &lltm_forward_aten);
  m.impl("lltm_backward", &lltm_backward_aten);
#endif
}
