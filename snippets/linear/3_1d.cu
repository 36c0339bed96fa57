// Rung 3 of the matmul ladder: 1-D blocktiling, a column of ROWS outputs per thread.
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W.
//
// The one idea: a thread computes ROWS outputs of one column of C, not one. For each k it reads one value
// of the B tile into a register and reuses it for its ROWS multiply-adds, reading the ROWS values of the
// A tile beside it: shared-memory loads per multiply-add fall from 2 (cuda-smem) to (ROWS + 1) / ROWS,
// 1.125 at ROWS = 8. With BLOCK x BLOCK outputs per block and BLOCK^2 / ROWS threads, the block's tiles
// are also bigger than cuda-smem's for as many threads: global loads per multiply-add fall to 2 / BLOCK.
#include <cuda_runtime.h>

#include <cstdint>

namespace KPLAY_NS {

#include "launch.cuh"  // tile_grid, launch_error

constexpr int BM = {{bt1_block}};  // rows of C per block
constexpr int BN = {{bt1_block}};  // columns of C per block
constexpr int BK = {{bt1_k}};      // k per shared-memory step
constexpr int TM = {{bt1_rows}};   // rows of C per thread, in one column
constexpr int THREADS = BM * BN / TM;
static_assert(THREADS <= 1024, "bt1_block^2 / bt1_rows threads: at most 1024 per block");
static_assert(BM % TM == 0 && BN >= 32, "a warp shares its rows: 32 or more columns per block");
static_assert((BM + BN) * BK * sizeof(double) <= 48 * 1024,
              "the float64 tiles exceed the 48 KB of static shared memory a block may have");

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_1d(const T* __restrict__ A, int64_t lda,  // (M, K), row stride lda
             const T* __restrict__ B, int64_t ldb,  // (N, K), row stride ldb
             const T* __restrict__ bias,            // (N,) or nullptr
             T* __restrict__ C, int64_t ldc,        // (M, N), row stride ldc
             int64_t M, int64_t N, int64_t K) {
  // k-major tiles (As[k][m]): for one k, a thread's ROWS values of A are neighbours, and a warp's 32
  // values of B (one per column) are too.
  __shared__ T As[BK][BM];
  __shared__ T Bs[BK][BN];

  const int tx = threadIdx.x % BN, ty = threadIdx.x / BN;  // column tx, rows ty*TM .. ty*TM + TM - 1
  const int64_t m0 = blockIdx.y * int64_t(BM), n0 = blockIdx.x * int64_t(BN);

  T acc[TM] = {};
  for (int64_t k0 = 0; k0 < K; k0 += BK) {
    // Copy: neighbouring threads read neighbouring k of one row (BK of them), then the next row.
    for (int i = threadIdx.x; i < BM * BK; i += THREADS) {
      const int r = i / BK, c = i % BK;
      As[c][r] = (m0 + r < M && k0 + c < K) ? A[(m0 + r) * lda + k0 + c] : T(0);
    }
    for (int i = threadIdx.x; i < BN * BK; i += THREADS) {
      const int r = i / BK, c = i % BK;
      Bs[c][r] = (n0 + r < N && k0 + c < K) ? B[(n0 + r) * ldb + k0 + c] : T(0);
    }
    __syncthreads();  // the tiles are complete

    // kplay:todo For each k: b = Bs[k][tx] in a register, then acc[i] += As[k][ty * TM + i] * b for i < TM.
    // kplay:why One load of B feeds TM multiply-adds: shared memory is read (TM + 1) / TM times per
    // kplay:why multiply-add, not twice.
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const T b = Bs[k][tx];
#pragma unroll
      for (int i = 0; i < TM; ++i) acc[i] += As[k][ty * TM + i] * b;
    }
    // kplay:end
    __syncthreads();  // everyone is done with the tiles before the next step overwrites them
  }
  const int64_t n = n0 + tx;
  if (n >= N) return;
  const T b = bias ? bias[n] : T(0);
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t m = m0 + ty * TM + i;
    if (m < M) C[m * ldc + n] = acc[i] + b;  // a warp writes 32 neighbouring columns of one row
  }
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write; an empty grid is a launch error
  dim3 blocks;
  if (const char* err = tile_grid(M, N, BM, BN, blocks)) return err;
  matmul_nt_1d<T><<<blocks, THREADS, 0, stream>>>(A, lda, B, ldb, bias, C, ldc, M, N, K);
  return launch_error();
}

}  // namespace KPLAY_NS
