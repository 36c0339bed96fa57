// Step 4 of the matmul ladder (cuda-2d): 2-D blocktiling, a TM x TN block of outputs per thread, scalar loads.
// From step 3: a thread's outputs span rows and columns, so TM + TN shared loads feed TM * TN multiply-adds.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. A thread computes a
// TM x TN block of C in registers. For each k it reads TM values of the A tile and TN of the B tile into
// registers and makes all TM * TN products of them (an outer product): shared-memory loads per multiply-add
// fall from (TM + 1) / TM (step 3) to (TM + TN) / (TM * TN), 1/4 at 8 x 8. The block's 128 x 128 tile of C
// with 256 threads also halves global loads per multiply-add against step 3's 64 x 64: 2 / 128.
//
// What it leaves for step 5: every global load and store moves 4 bytes, and the threads of a warp, TN
// columns apart, read a B tile row through the same banks (a conflict: their reads take turns).
#include "ladder.cuh"  // launch_matmul_nt, tile_grid, launch_error, copy_tile

namespace KPLAY_NS {

constexpr int BM = {{block_m}};   // rows of C per block
constexpr int BN = {{block_n}};   // columns of C per block
constexpr int BK = {{block_k}};   // k per shared-memory step
constexpr int TM = {{thread_m}};  // rows of C per thread
constexpr int TN = {{thread_n}};  // columns of C per thread
constexpr int THREADS = (BM / TM) * (BN / TN);
static_assert(BM % TM == 0 && BN % TN == 0, "a block tile is a whole number of thread tiles");
static_assert(THREADS >= 32 && THREADS <= 1024, "(block_m / thread_m) * (block_n / thread_n) threads: 32 to 1024");
static_assert((BM + BN) * BK * sizeof(double) <= 48 * 1024,
              "the float64 tiles exceed the 48 KB of static shared memory a block may have");

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_2d(const T* __restrict__ A, int64_t lda,  // (M, K), row stride lda
             const T* __restrict__ B, int64_t ldb,  // (N, K), row stride ldb
             const T* __restrict__ bias,            // (N,) or nullptr
             T* __restrict__ C, int64_t ldc,        // (M, N), row stride ldc
             int64_t M, int64_t N, int64_t K) {
  __shared__ T As[BK][BM];  // k-major, as in step 3
  __shared__ T Bs[BK][BN];

  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);  // rows ty*TM.., columns tx*TN..
  const int64_t m0 = blockIdx.y * int64_t(BM), n0 = blockIdx.x * int64_t(BN);

  T acc[TM][TN] = {};
  for (int64_t k0 = 0; k0 < K; k0 += BK) {
    copy_tile<BM, BK, THREADS>(A, lda, m0, k0, M, K, As);  // as in step 3 (ladder.cuh)
    copy_tile<BN, BK, THREADS>(B, ldb, n0, k0, N, K, Bs);
    __syncthreads();  // the tiles are complete

    // kplay:todo For each k: a[i] = As[k][ty * TM + i], b[j] = Bs[k][tx * TN + j]; acc[i][j] += a[i] * b[j].
    // kplay:why TM + TN loads from shared memory feed TM * TN multiply-adds: an outer product in registers.
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      T a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[k][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
    // kplay:end
    __syncthreads();  // everyone is done with the tiles before the next step overwrites them
  }
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int64_t n = n0 + tx * TN + j;
    if (n >= N) break;
    const T b = bias ? bias[n] : T(0);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t m = m0 + ty * TM + i;
      if (m < M) C[m * ldc + n] = acc[i][j] + b;
    }
  }
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write; an empty grid is a launch error
  dim3 blocks;
  if (const char* err = tile_grid(M, N, BM, BN, blocks)) return err;
  matmul_nt_2d<T><<<blocks, THREADS, 0, stream>>>(A, lda, B, ldb, bias, C, ldc, M, N, K);
  return launch_error();
}

}  // namespace KPLAY_NS
