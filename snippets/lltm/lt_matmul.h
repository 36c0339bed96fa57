// Matmuls through cuBLASLt with an algorithm chosen once per shape, for lltm_fast.cpp (variant cuda-fast).
// The GPU idles until the forward's matmul is launched, so every microsecond of host work before that launch
// counts. Two costs are avoided here:
// - at::mm and at::bmm call cuBLAS, which chooses its kernel on every call. cuBLASLt separates the choice
//   from the call: a plan (matrix descriptors and an algorithm) is made once per shape. The algorithm is the
//   fastest of the heuristic's first few, timed on first use: its first is not always the fastest.
// - a transposed or sliced view is a dispatcher call each; a Mat describes the same memory without one.
// float32 only, computed in float32 as PyTorch does by default (allow_tf32 is not consulted: never TF32);
// float64, matrices with no unit stride, and shapes cuBLASLt has no algorithm for go to ATen.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>

// A batch of matrices in a tensor's memory: what t.as_strided({batch, rows, cols}, strides) would describe.
struct Mat {
  at::Tensor t;
  int64_t rows, cols, row_stride, col_stride, batch_stride;
  Mat transposed() const { return {t, cols, rows, col_stride, row_stride, batch_stride}; }
  at::Tensor view(int64_t batch) const {
    return t.as_strided({batch, rows, cols}, {batch_stride, row_stride, col_stride});
  }
};

inline Mat mat(const at::Tensor& t) { return {t, t.size(0), t.size(1), t.stride(0), t.stride(1), 0}; }

// One operand as cuBLASLt sees it: column-major, so a row-major (r x c) matrix is its (c x r) transpose.
struct LtOperand {
  cublasOperation_t op;
  int64_t rows, cols, ld, batch_stride;
};

// For out = a @ b, cuBLASLt computes out^T = b^T a^T: each factor is the transpose of a or b. False if
// neither of m's dimensions has unit stride.
inline bool lt_transposed(const Mat& m, LtOperand& o) {
  if (m.col_stride == 1 && m.row_stride >= std::max<int64_t>(m.cols, 1)) {  // row-major: m^T as it is
    o = {CUBLAS_OP_N, m.cols, m.rows, m.row_stride, m.batch_stride};
  } else if (m.row_stride == 1 && m.col_stride >= std::max<int64_t>(m.rows, 1)) {  // column-major: m, transposed
    o = {CUBLAS_OP_T, m.rows, m.cols, m.col_stride, m.batch_stride};
  } else {
    return false;
  }
  return true;
}

#define LT_CHECK(call)                                                                                        \
  do {                                                                                                        \
    const cublasStatus_t status_ = (call);                                                                   \
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
inline uint32_t lt_alignment(const void* p) {
  uint32_t bytes = 1;
  while (bytes < 256 && reinterpret_cast<uintptr_t>(p) % (2 * bytes) == 0) bytes *= 2;
  return bytes;
}

// Where the operands are: a plan is chosen on the call that first needs it, with that call's own matrices.
struct LtCall {
  const float *a, *b;  // cuBLASLt's a and b: the caller's b and a (out^T = b^T a^T)
  float* out;
  cudaStream_t stream;
  at::TensorOptions options;  // for a workspace: bytes, on out's device
};

// One matmul with the plan's descriptors and the given algorithm; its workspace from PyTorch's caching allocator.
inline cublasStatus_t lt_launch(const LtPlan& plan, const cublasLtMatmulAlgo_t& algo, size_t workspace,
                                const LtCall& call) {
  at::Tensor space;  // on the current stream, which is the call's
  if (workspace > 0) space = at::empty({int64_t(workspace)}, call.options);
  const float one = 1, zero = 0;
  return cublasLtMatmul(plan.handle, plan.desc, &one, call.a, plan.a, call.b, plan.b, &zero, call.out, plan.out,
                        call.out, plan.out, &algo, workspace > 0 ? space.data_ptr() : nullptr, workspace, call.stream);
}

// A CUDA event for timing, destroyed with its scope (an exception included).
struct LtEvent {
  cudaEvent_t event;
  LtEvent() { C10_CUDA_CHECK(cudaEventCreate(&event)); }
  ~LtEvent() { cudaEventDestroy(event); }
};

// Milliseconds for kLtTimed calls of one algorithm after an untimed one (CUDA events); infinity if it fails.
// Each algorithm starts on an idle stream, as the others did.
constexpr int kLtCandidates = 8, kLtTimed = 3;
inline float lt_time(const LtPlan& plan, const cublasLtMatmulHeuristicResult_t& result, const LtCall& call) {
  const LtEvent start, stop;
  C10_CUDA_CHECK(cudaStreamSynchronize(call.stream));
  bool ok = lt_launch(plan, result.algo, result.workspaceSize, call) == CUBLAS_STATUS_SUCCESS;
  C10_CUDA_CHECK(cudaEventRecord(start.event, call.stream));
  for (int i = 0; ok && i < kLtTimed; ++i) {
    ok = lt_launch(plan, result.algo, result.workspaceSize, call) == CUBLAS_STATUS_SUCCESS;
  }
  C10_CUDA_CHECK(cudaEventRecord(stop.event, call.stream));
  float ms = 0;
  C10_CUDA_CHECK(cudaEventSynchronize(stop.event));
  C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event, stop.event));
  return ok ? ms : std::numeric_limits<float>::infinity();
}

// The plan's algorithm, given the operands' alignments: the fastest of the heuristic's first kLtCandidates,
// timed on the call's own matrices (it writes `out`, which the call overwrites anyway). A stream being
// recorded into a CUDA graph cannot wait for a timing: there, the heuristic's first, kept for the shape from
// then on (cuda-graph runs a call directly before it records one, so its plans are timed already). No plan (ATen
// does the matmul) when no algorithm ran.
inline void lt_choose(LtPlan& plan, const std::array<uint32_t, 3>& align, const LtCall& call) {
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
  std::array<cublasLtMatmulHeuristicResult_t, kLtCandidates> results;
  int found = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(plan.handle, plan.desc, plan.a, plan.b, plan.out, plan.out, preference,
                                          kLtCandidates, results.data(), &found));
  cublasLtMatmulPreferenceDestroy(preference);
  cudaStreamCaptureStatus capturing;
  if (cudaStreamIsCapturing(call.stream, &capturing) != cudaSuccess) {  // the legacy stream, beside a capture
    (void)cudaGetLastError();
    capturing = cudaStreamCaptureStatusActive;
  }
  const bool timed = found > 1 && capturing == cudaStreamCaptureStatusNone;
  int best = 0;
  float best_ms = std::numeric_limits<float>::infinity();
  for (int i = 0; timed && i < found; ++i) {
    if (const float ms = lt_time(plan, results[i], call); ms < best_ms) best = i, best_ms = ms;
  }
  plan.found = found > 0 && (!timed || best_ms < std::numeric_limits<float>::infinity());
  plan.algo = results[best].algo;
  plan.workspace = results[best].workspaceSize;
}

// The plan for out (m x n, column-major, contiguous; `batch` of them) = op(a) op(b), whose pointers have
// the given alignments; made on first use (with `call`'s matrices), then found in a map.
inline const LtPlan& lt_plan(const LtOperand& a, const LtOperand& b, int64_t m, int64_t n, int64_t batch, int device,
                             const std::array<uint32_t, 3>& align, const LtCall& call) {
  static std::mutex lock;
  static std::map<int, cublasLtHandle_t> handles;
  static std::map<std::array<int64_t, 17>, LtPlan> plans;  // one per matmul shape seen, a few hundred bytes each
  const std::array<int64_t, 17> key = {device, a.op, a.rows, a.cols, a.ld, a.batch_stride, b.op, b.rows, b.cols,
                                       b.ld, b.batch_stride, m, n, batch, align[0], align[1], align[2]};
  const std::lock_guard<std::mutex> hold(lock);  // also through a new plan's timing: a few ms, once per shape
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
  lt_choose(plan, align, call);
  return plans.emplace(key, plan).first->second;
}

// out = a @ b for `batch` pairs of matrices: out (batch, m, n) or, for one pair, (m, n); contiguous, of
// a's dtype and device.
// Matmuls this thread handed to ATen (float64, or no cuBLASLt algorithm): ATen's cuBLAS keeps a workspace per
// stream that a CUDA graph must not bake in (cuda-graph records none of these).
inline thread_local int64_t lt_aten_matmuls = 0;

inline void matmul_out(const at::Tensor& out, const Mat& a, const Mat& b, int64_t batch) {
  auto aten = [&] {
    ++lt_aten_matmuls;
    at::Tensor result = out.view({batch, a.rows, b.cols});
    at::bmm_out(result, a.view(batch), b.view(batch));
  };
  LtOperand from_a, from_b;
  if (out.scalar_type() != at::kFloat || out.numel() == 0 || a.cols == 0 || !lt_transposed(a, from_a) ||
      !lt_transposed(b, from_b)) {
    return aten();
  }
  const LtCall call = {b.t.data_ptr<float>(), a.t.data_ptr<float>(), out.data_ptr<float>(),
                       c10::cuda::getCurrentCUDAStream(), out.options().dtype(at::kByte)};
  const LtPlan& plan = lt_plan(from_b, from_a, b.cols, a.rows, batch, out.get_device(),
                               {lt_alignment(call.a), lt_alignment(call.b), lt_alignment(call.out)}, call);
  if (!plan.found) return aten();
  LT_CHECK(lt_launch(plan, plan.algo, plan.workspace, call));
}

// Split-K: a @ b as `parts` partial products (parts, m, n), the sum over k cut into equal slices, all in one
// batched matmul (the slices are strided views of the same memory: no copy); one part (a plain matmul) when k
// does not divide. Why: the library picks its kernel from the shape, and for a large, flat problem such as
// the large forward's (1024 x 1536) @ (1536 x 3072) it picks small tiles; k-slices of a quarter get larger
// tiles, fast enough to pay for the caller reading several partial products instead of one
// (benchmarks/results/2026-12-01-7f29147-h200-lltm-notes.md has the figures). It does not pay for the backward's d_X.
inline at::Tensor partial_products(const Mat& a, const Mat& b, int64_t parts) {
  if (parts <= 1 || a.cols % parts != 0) parts = 1;
  const int64_t s = a.cols / parts;  // part p: a's columns p*s .. (p+1)*s - 1 times b's rows the same
  Mat a_parts = a, b_parts = b;
  a_parts.cols = b_parts.rows = s;
  a_parts.batch_stride = s * a.col_stride;
  b_parts.batch_stride = s * b.row_stride;
  at::Tensor out = at::empty({parts, a.rows, b.cols}, a.t.options());
  matmul_out(out, a_parts, b_parts, parts);
  return out;
}
