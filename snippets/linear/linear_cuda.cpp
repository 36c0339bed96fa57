// Custom linear layer on the GPU: the C++ binding every step of the matmul ladder shares.
// y = x W^T + b with W shaped (out_features, in_features) as in torch.nn.Linear.
// Written against the stable ABI (torch/csrc/stable): it builds in about a second, and the kernels live
// in a .cu file that includes only cuda_runtime.h, so nvcc never parses torch's headers.
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers

#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // aoti_torch_get_current_cuda_stream (-DUSE_CUDA)
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>  // STD_TORCH_CHECK

#include <cstdint>
#include <tuple>
#include <vector>

namespace KPLAY_NS {

// Defined by the step's .cu file (ladder.cuh): C[m][n] = sum_k A[m][k] B[n][k] (+ bias[n]), every operand
// row-major and contiguous along k, with row strides lda, ldb, ldc. Returns nullptr on success, else the
// CUDA error string.
const char* launch_matmul_nt(const float* A, int64_t lda, const float* B, int64_t ldb, const float* bias, float* C,
                             int64_t ldc, int64_t M, int64_t N, int64_t K, void* stream);
const char* launch_matmul_nt(const double* A, int64_t lda, const double* B, int64_t ldb, const double* bias,
                             double* C, int64_t ldc, int64_t M, int64_t N, int64_t K, void* stream);
// bfloat16 (bfloat16 true) or float16 as their bits: the tensor-core steps (tensor.cuh), float32 sums.
const char* launch_matmul_nt(const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, const uint16_t* bias,
                             uint16_t* C, int64_t ldc, int64_t M, int64_t N, int64_t K, bool bfloat16, void* stream);

}  // namespace KPLAY_NS

namespace {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

void* current_stream(const Tensor& t) {
  void* stream = nullptr;
  // Compared by hand: torch 2.11's headers have no STABLE_TORCH_ERROR_CODE_CHECK.
  STD_TORCH_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream) == AOTI_TORCH_SUCCESS,
                  "linear: could not get the current CUDA stream");
  return stream;
}

void check_matrix(const Tensor& t, const Tensor& like, const char* name) {
  STD_TORCH_CHECK(t.is_cuda(), "linear: ", name, " must be a CUDA tensor");
  STD_TORCH_CHECK(t.get_device_index() == like.get_device_index(), "linear: ", name, " is on another GPU");
  STD_TORCH_CHECK(t.scalar_type() == like.scalar_type(), "linear: ", name, " has another dtype");
  const ScalarType type = t.scalar_type();
  STD_TORCH_CHECK(type == ScalarType::Float || type == ScalarType::Double || type == ScalarType::BFloat16 ||
                      type == ScalarType::Half,
                  "linear: float32, float64, bfloat16 or float16 only");
}

bool is_16_bit(const Tensor& t) {
  return t.scalar_type() == ScalarType::BFloat16 || t.scalar_type() == ScalarType::Half;
}

// The tensor-core steps read rows in 16-byte pieces: a row's length a multiple of 8 values (4 floats) and a
// 16-byte aligned start, else a copy padded with zeros (which add nothing to a product along k). float32 rows
// too for a step built with -DWHOLE_FLOAT_ROWS (task.toml: TMA's strides); the others take them as they come.
bool wants_whole_rows(const Tensor& t) {
#ifdef WHOLE_FLOAT_ROWS
  if (t.scalar_type() == ScalarType::Float) return true;
#endif
  return is_16_bit(t);
}

Tensor whole_16_byte_rows(Tensor t) {
  const int64_t values = is_16_bit(t) ? 8 : 4, k = t.size(1), padded = (k + values - 1) / values * values;
  if (padded == k && reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0) return t;
  Tensor copy = torch::stable::new_zeros(t, {t.size(0), padded});
  Tensor inside = torch::stable::narrow(copy, 1, 0, k);
  torch::stable::copy_(inside, t);
  return copy;
}

// C = A B^T (+ bias) for A (M, K) and B (N, K), both made contiguous here.
Tensor matmul_nt(Tensor A, Tensor B, const Tensor* bias) {
  A = torch::stable::contiguous(A);
  B = torch::stable::contiguous(B);
  const int64_t M = A.size(0), N = B.size(0);
  Tensor C = torch::stable::new_empty(A, {M, N});
  if (wants_whole_rows(A)) A = whole_16_byte_rows(A), B = whole_16_byte_rows(B);
  const int64_t K = A.size(1);
  void* stream = current_stream(A);
  const char* err;
  if (is_16_bit(A)) {
    auto bits = [](const Tensor& t) { return static_cast<const uint16_t*>(t.const_data_ptr()); };
    err = KPLAY_NS::launch_matmul_nt(bits(A), K, bits(B), K, bias ? bits(*bias) : nullptr,
                                     static_cast<uint16_t*>(C.mutable_data_ptr()), N, M, N, K,
                                     A.scalar_type() == ScalarType::BFloat16, stream);
  } else if (A.scalar_type() == ScalarType::Float) {
    err = KPLAY_NS::launch_matmul_nt(A.const_data_ptr<float>(), K, B.const_data_ptr<float>(), K,
                                            bias ? bias->const_data_ptr<float>() : nullptr,
                                            C.mutable_data_ptr<float>(), N, M, N, K, stream);
  } else {
    err = KPLAY_NS::launch_matmul_nt(A.const_data_ptr<double>(), K, B.const_data_ptr<double>(), K,
                                             bias ? bias->const_data_ptr<double>() : nullptr,
                                             C.mutable_data_ptr<double>(), N, M, N, K, stream);
  }
  STD_TORCH_CHECK(err == nullptr, "linear: matmul kernel failed: ", err);
  return C;
}

Tensor linear_forward(Tensor x, Tensor weight, Tensor bias) {
  check_matrix(x, x, "x");
  check_matrix(weight, x, "weight");
  check_matrix(bias, x, "bias");
  STD_TORCH_CHECK(x.dim() == 2 && weight.dim() == 2, "linear: x is (batch, in), weight is (out, in)");
  STD_TORCH_CHECK(x.size(1) == weight.size(1), "linear: x and weight disagree on in_features");
  STD_TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias is (out,)");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  bias = torch::stable::contiguous(bias);
  // y[m][n] = sum_k x[m][k] W[n][k] + b[n]: x and W are both contiguous along k, as matmul_nt wants.
  return matmul_nt(x, weight, &bias);
}

std::tuple<Tensor, Tensor, Tensor> linear_backward(Tensor grad_out, Tensor x, Tensor weight) {
  check_matrix(x, x, "x");
  check_matrix(grad_out, x, "grad_out");
  check_matrix(weight, x, "weight");
  STD_TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && grad_out.dim() == 2 && x.size(1) == weight.size(1) &&
                      grad_out.size(0) == x.size(0) && grad_out.size(1) == weight.size(0),
                  "linear: grad_out is (batch, out), x (batch, in), weight (out, in)");
  torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  using torch::stable::transpose;
  // Each product is rewritten as A B^T with k contiguous, so one kernel serves all three; the
  // transposed copies cost one pass over each operand, small next to the product itself.
  Tensor gy = torch::stable::contiguous(grad_out);
  Tensor gy_t = transpose(gy, 0, 1);  // (out, batch); matmul_nt makes its operands contiguous
  Tensor grad_input = matmul_nt(gy, transpose(weight, 0, 1), nullptr);  // gy W: k runs over out
  Tensor grad_weight = matmul_nt(gy_t, transpose(x, 0, 1), nullptr);    // gy^T x: k runs over batch
  // The bias was added to every row: its gradient is the column sum of gy, a reduction (the sum
  // family's subject), left to torch.
  Tensor grad_bias = torch::stable::sum(gy, std::vector<int64_t>{0});
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

STABLE_TORCH_LIBRARY(KPLAY_NS, m) {
  m.def("linear_forward(Tensor x, Tensor weight, Tensor bias) -> Tensor");
  m.def("linear_backward(Tensor grad_out, Tensor x, Tensor weight) -> (Tensor, Tensor, Tensor)");
}

// Autograd is wired in spec.py (torch.library.register_autograd), which calls linear_backward.
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CUDA, m) {
  m.impl("linear_forward", TORCH_BOX(&linear_forward));
  m.impl("linear_backward", TORCH_BOX(&linear_backward));
}
