// What every rung of the matmul ladder shares: the entry points linear_cuda.cpp calls, the grid of tiles over
// C, and the launch's error. Each rung's .cu holds its kernel and what it changes; it defines
//   template <typename T> const char* launch(A, lda, B, ldb, bias, C, ldc, M, N, K, stream);
// for C[m][n] = bias[n] + sum_k A[m][k] B[n][k]. Included inside the rung's namespace.
#pragma once

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream);  // the rung's

// nullptr on success, else the CUDA error. `stream` is the caller's current cudaStream_t.
const char* launch_matmul_nt(const float* A, int64_t lda, const float* B, int64_t ldb, const float* bias, float* C,
                             int64_t ldc, int64_t M, int64_t N, int64_t K, void* stream) {
  return launch(A, lda, B, ldb, bias, C, ldc, M, N, K, static_cast<cudaStream_t>(stream));
}
const char* launch_matmul_nt(const double* A, int64_t lda, const double* B, int64_t ldb, const double* bias,
                             double* C, int64_t ldc, int64_t M, int64_t N, int64_t K, void* stream) {
  return launch(A, lda, B, ldb, bias, C, ldc, M, N, K, static_cast<cudaStream_t>(stream));
}

// The grid that covers C (M x N) with tiles of BM rows and BN columns, or an error for a batch too tall.
inline const char* tile_grid(int64_t M, int64_t N, int64_t BM, int64_t BN, dim3& blocks) {
  if ((M + BM - 1) / BM > 65535) return "linear: batch too large for one grid (gridDim.y <= 65535)";
  blocks = dim3(unsigned((N + BN - 1) / BN), unsigned((M + BM - 1) / BM));
  return nullptr;
}

// nullptr when the launch went through, else CUDA's words for what went wrong.
inline const char* launch_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
