// Step 3 of the matmul ladder (cuda-1d): 1-D blocktiling, a column of TM outputs per thread.
// From step 2: each B value read from shared memory feeds TM multiply-adds, and a block's tile of C grows.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. A thread computes TM
// outputs of one column of C, not one. For each k it reads one value of the B tile into a register and
// reuses it for its TM multiply-adds, reading the TM values of the A tile beside it: shared-memory loads
// per multiply-add fall from 2 (step 2) to (TM + 1) / TM, 1.125 at TM = 8. With BM x BN outputs per block
// (both the param `block`) and BM * BN / TM threads, the block's tiles are also bigger than step 2's for as
// many threads: global loads per multiply-add fall to 2 / BM.
#include "ladder.cuh"  // launch_matmul_nt, tile_grid, launch_error, copy_tile

namespace KPLAY_NS {

constexpr int BM = {{block}};     // rows of C per block
constexpr int BN = {{block}};     // columns of C per block
constexpr int BK = {{block_k}};   // k per shared-memory step
constexpr int TM = {{thread_m}};  // rows of C per thread, in one column
constexpr int THREADS = BM * BN / TM;
static_assert(THREADS <= 1024, "block^2 / thread_m threads: at most 1024 per block");
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
  // k-major tiles (As[k][m]): for one k, a thread's TM values of A are neighbours, and a warp's 32
  // values of B (one per column) are too.
  __shared__ T As[BK][BM];
  __shared__ T Bs[BK][BN];

  const int tx = threadIdx.x % BN, ty = threadIdx.x / BN;  // column tx, rows ty*TM .. ty*TM + TM - 1
  const int64_t m0 = blockIdx.y * int64_t(BM), n0 = blockIdx.x * int64_t(BN);

  T acc[TM] = {};
  for (int64_t k0 = 0; k0 < K; k0 += BK) {
    copy_tile<BM, BK, THREADS>(A, lda, m0, k0, M, K, As);  // ladder.cuh: one value per thread per turn
    copy_tile<BN, BK, THREADS>(B, ldb, n0, k0, N, K, Bs);
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
