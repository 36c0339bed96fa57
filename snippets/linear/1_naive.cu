// Step 1 of the matmul ladder (cuda-naive): one thread per output element, every operand from global memory.
// The start: nothing is reused, so each multiply-add waits on two global loads.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W.
#include "ladder.cuh"  // launch_matmul_nt, tile_grid, launch_error

namespace KPLAY_NS {

// threadIdx.x runs along n, so a warp writes 32 neighbouring outputs (coalesced) and shares one row
// of A (a broadcast); but its 32 reads of B come from 32 different rows, every element is read from
// global memory (or L1) once per output that needs it, and each multiply-add waits on two loads.
// Step 2 (cuda-smem) fixes exactly this.
template <typename T>
__global__ void matmul_nt_naive(const T* __restrict__ A, int64_t lda,  // (M, K), row stride lda
                                const T* __restrict__ B, int64_t ldb,  // (N, K), row stride ldb
                                const T* __restrict__ bias,            // (N,) or nullptr
                                T* __restrict__ C, int64_t ldc,        // (M, N), row stride ldc
                                int64_t M, int64_t N, int64_t K) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t m = blockIdx.y * int64_t(blockDim.y) + threadIdx.y;
  if (m >= M || n >= N) return;  // the last blocks overhang the matrix when N, M are not multiples of 32, 8
  T acc = bias ? bias[n] : T(0);
  for (int64_t k = 0; k < K; ++k) acc += A[m * lda + k] * B[n * ldb + k];
  C[m * ldc + n] = acc;
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write; an empty grid is a launch error
  const dim3 threads(32, 8);  // a warp is 32 neighbouring n of one row m
  dim3 blocks;
  if (const char* err = tile_grid(M, N, 8, 32, blocks)) return err;
  matmul_nt_naive<T><<<blocks, threads, 0, stream>>>(A, lda, B, ldb, bias, C, ldc, M, N, K);
  return launch_error();
}

}  // namespace KPLAY_NS
