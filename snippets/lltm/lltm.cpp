// The LLTM cell as one PyTorch op with a C++ backward: the tutorial's lltm.cpp (ATen) and lltm_cuda.cpp
// (built with -DLLTM_CUDA, next to lltm.cu) in one file, because both variants share the op and its autograd.
// Differences from the tutorial, each for speed (its Python autograd.Function is slower than plain PyTorch
// on a GPU: host overhead dominates, DESIGN.md):
// - autograd lives in C++ (torch::autograd::Function registered for the Autograd key): a forward or a
//   backward is one call from Python, with no Python in between;
// - the gate buffer keeps the activations, which is all the backward needs: fewer tensors;
// - (cuda) the forward's matmul runs as four partial products (split-K) that the kernel adds: the library
//   then picks a faster kernel for it (partial_products says more);
// - (cuda) the matmuls go through cuBLASLt, with each shape's algorithm chosen once (matmul_out), not on
//   every call as at::mm does;
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
// Forward and backward around the fused kernels of lltm.cu (variant cuda). The matmuls stay in cuBLAS
// (cuBLASLt, matmul_out); everything pointwise is one kernel per direction.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>

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

// ---- The matmuls, through cuBLASLt with an algorithm chosen once per shape --------------------------------
// The GPU idles until the forward's matmul is launched, so every microsecond of host work before that launch
// counts. Two costs are avoided here:
// - at::mm and at::bmm call cuBLAS, which chooses its kernel on every call. cuBLASLt separates the choice
//   from the call: a plan (matrix descriptors and the heuristic's first algorithm) is made once per shape.
// - a transposed or sliced view is a dispatcher call each; a Mat describes the same memory without one.
// The large forward: 315 -> 293 us on an H200, same run (benchmarks/results/lltm-notes.md). float32 only,
// computed in float32 as PyTorch does by default (allow_tf32 is not consulted: never TF32); float64,
// matrices with no unit stride, and shapes cuBLASLt has no algorithm for go to ATen.

// A batch of matrices in a tensor's memory: what t.as_strided({batch, rows, cols}, strides) would describe.
struct Mat {
  Tensor t;
  int64_t rows, cols, row_stride, col_stride, batch_stride;
  Mat transposed() const { return {t, cols, rows, col_stride, row_stride, batch_stride}; }
  Tensor view(int64_t batch) const { return t.as_strided({batch, rows, cols}, {batch_stride, row_stride, col_stride}); }
};

static Mat mat(const Tensor& t) { return {t, t.size(0), t.size(1), t.stride(0), t.stride(1), 0}; }

// One operand as cuBLASLt sees it: column-major, so a row-major (r x c) matrix is its (c x r) transpose.
struct LtOperand {
  cublasOperation_t op;
  int64_t rows, cols, ld, batch_stride;
};

// For out = a @ b, cuBLASLt computes out^T = b^T a^T: each factor is the transpose of a or b. False if
// neither of m's dimensions has unit stride.
static bool lt_transposed(const Mat& m, LtOperand& o) {
  if (m.col_stride == 1 && m.row_stride >= std::max<int64_t>(m.cols, 1)) {  // row-major: m^T as it is
    o = {CUBLAS_OP_N, m.cols, m.rows, m.row_stride, m.batch_stride};
  } else if (m.row_stride == 1 && m.col_stride >= std::max<int64_t>(m.rows, 1)) {  // column-major: m, transposed
    o = {CUBLAS_OP_T, m.rows, m.cols, m.col_stride, m.batch_stride};
  } else {
    return false;
  }
  return true;
}

#define LT_CHECK(call)                                                                                    \
  do {                                                                                                    \
    const cublasStatus_t status_ = (call);                                                               \
    TORCH_CHECK(status_ == CUBLAS_STATUS_SUCCESS, "lltm (CUDA): ", #call, ": ", cublasLtGetStatusString(status_)); \
  } while (0)

struct LtPlan {
  bool found;               // false: cuBLASLt has no algorithm for it, ATen does it
  cublasLtHandle_t handle;  // the device's: safe to share between threads, as the plan sets nothing on it
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, out;
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
};

constexpr size_t kLtMaxWorkspace = 64 << 20;  // split-K algorithms need one

// The largest power of two (up to 256) that divides a pointer: the algorithm must not assume more.
static uint32_t alignment(const void* p) {
  uint32_t bytes = 1;
  while (bytes < 256 && reinterpret_cast<uintptr_t>(p) % (2 * bytes) == 0) bytes *= 2;
  return bytes;
}

// The plan for out (m x n, column-major, contiguous; `batch` of them) = op(a) op(b), whose pointers have
// the given alignments.
static const LtPlan& lt_plan(const LtOperand& a, const LtOperand& b, int64_t m, int64_t n, int64_t batch, int device,
                             const std::array<uint32_t, 3>& align) {
  static std::mutex lock;
  static std::map<int, cublasLtHandle_t> handles;
  static std::map<std::array<int64_t, 17>, LtPlan> plans;  // one per matmul shape seen, a few hundred bytes each
  const std::array<int64_t, 17> key = {device, a.op, a.rows, a.cols, a.ld, a.batch_stride, b.op, b.rows, b.cols,
                                       b.ld, b.batch_stride, m, n, batch, align[0], align[1], align[2]};
  const std::lock_guard<std::mutex> hold(lock);
  if (auto found = plans.find(key); found != plans.end()) return found->second;
  LtPlan plan;
  if (!handles.count(device)) LT_CHECK(cublasLtCreate(&handles[device]));  // the caller's guard set the device
  plan.handle = handles[device];
  LT_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &a.op, sizeof(a.op)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &b.op, sizeof(b.op)));
  LT_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, a.rows, a.cols, a.ld));
  LT_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_32F, b.rows, b.cols, b.ld));
  LT_CHECK(cublasLtMatrixLayoutCreate(&plan.out, CUDA_R_32F, m, n, m));  // out: contiguous
  const int32_t count = int32_t(batch);
  for (auto [layout, stride] : {std::pair{plan.a, a.batch_stride}, std::pair{plan.b, b.batch_stride},
                                std::pair{plan.out, m * n}}) {
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                              sizeof(stride)));
  }
  cublasLtMatmulPreference_t preference;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kLtMaxWorkspace,
                                                sizeof(kLtMaxWorkspace)));
  for (auto [attribute, bytes] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0]},
                                  std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1]},
                                  std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]},
                                  std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[2]}}) {
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof(bytes)));
  }
  cublasLtMatmulHeuristicResult_t best;
  int found = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(plan.handle, plan.desc, plan.a, plan.b, plan.out, plan.out, preference, 1,
                                          &best, &found));
  cublasLtMatmulPreferenceDestroy(preference);
  plan.found = found == 1;
  plan.algo = best.algo;
  plan.workspace = best.workspaceSize;
  return plans.emplace(key, plan).first->second;
}

// out = a @ b for `batch` pairs of matrices: out (batch, m, n) or, for one pair, (m, n); contiguous, of
// a's dtype and device.
static void matmul_out(const Tensor& out, const Mat& a, const Mat& b, int64_t batch) {
  auto aten = [&] {
    Tensor result = out.view({batch, a.rows, b.cols});
    at::bmm_out(result, a.view(batch), b.view(batch));
  };
  LtOperand from_a, from_b;
  if (out.scalar_type() != at::kFloat || out.numel() == 0 || a.cols == 0 || !lt_transposed(a, from_a) ||
      !lt_transposed(b, from_b)) {
    return aten();
  }
  const float *pa = a.t.data_ptr<float>(), *pb = b.t.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const LtPlan& plan = lt_plan(from_b, from_a, b.cols, a.rows, batch, out.get_device(),
                               {alignment(pb), alignment(pa), alignment(po)});
  if (!plan.found) return aten();
  Tensor workspace;  // from PyTorch's caching allocator, on this stream
  if (plan.workspace > 0) workspace = at::empty({int64_t(plan.workspace)}, out.options().dtype(at::kByte));
  const float one = 1, zero = 0;
  LT_CHECK(cublasLtMatmul(plan.handle, plan.desc, &one, pb, plan.a, pa, plan.b, &zero, po, plan.out, po, plan.out,
                          &plan.algo, plan.workspace > 0 ? workspace.data_ptr() : nullptr, plan.workspace,
                          c10::cuda::getCurrentCUDAStream()));
}

// Split-K: a @ b as `parts` partial products (parts, m, n), the sum over k cut into equal slices, all in one
// batched matmul (the slices are strided views of the same memory: no copy); one part (a plain matmul) when k
// does not divide. Why: the library picks its kernel from the shape, and for the large forward,
// (1024 x 1536) @ (1536 x 3072), it picks one of 64 x 64 tiles (255 us on an H200); four (1024 x 384) @
// (384 x 3072) products get 128 x 128 tiles and take 207 us, all four together. The kernel then reads four
// partial products instead of one (20 us instead of 10): about 40 us less per forward. The same trick does
// not pay for the backward's d_X (211 us as one matmul, 241 to 274 in parts before the sum).
static Tensor partial_products(const Mat& a, const Mat& b, int64_t parts) {
  if (parts <= 1 || a.cols % parts != 0) parts = 1;
  const int64_t s = a.cols / parts;  // part p: a's columns p*s .. (p+1)*s - 1 times b's rows the same
  Mat a_parts = a, b_parts = b;
  a_parts.cols = b_parts.rows = s;
  a_parts.batch_stride = s * a.col_stride;
  b_parts.batch_stride = s * b.row_stride;
  Tensor out = at::empty({parts, a.rows, b.cols}, a.t.options());
  matmul_out(out, a_parts, b_parts, parts);
  return out;
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
  const Tensor products = partial_products(mat(X), mat(weights).transposed(), kForwardParts);
  Tensor gates = at::empty({batch, 3 * state}, X.options());
  Tensor new_h = at::empty({batch, state}, X.options());
  Tensor new_cell = at::empty({batch, state}, X.options());
  const Tensor b = bias.contiguous();
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
      matmul_out(d_X, mat(d_gates), mat(weights), 1);
    } else {
      at::sum_out(d_X, partial_products(mat(d_gates), mat(weights), kBackwardParts), /*dim=*/0);
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
    matmul_out(d_weights, mat(d_gates).transposed(), mat(X), 1);
    wait_for(stream, side);
  } else {
    compute_d_X();
    matmul_out(d_weights, mat(d_gates).transposed(), mat(X), 1);
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
