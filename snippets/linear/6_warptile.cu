// Step 6 of the matmul ladder (cuda-warptile): a tile per warp, between the block's and the thread's.
// From step 5: each warp reads only its own slice of the tiles, and a thread's loads of a step start together.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. The block's BM x BN tile
// of C is split into WM x WN tiles, one per warp, and each warp's into sub-tiles of 8 x 4 lanes (each lane
// TM x TN outputs) that the warp walks WM / (8 TM) x WN / (4 TN) times. A thread's outputs are then a few
// small blocks, each a whole 16-byte row of registers, that all 32 lanes read from shared memory in step:
// one warp touches a (WM + WN) x BK slice of the tiles, not the whole block's, and with TM = 8, TN = 4,
// WM = WN = 64 a thread makes 8 x 16 = 128 products per (8 + 16) / 4 = 6 float4 loads from shared memory:
// 6 load instructions per 128 multiply-adds (step 5: 4 per 64). The 128-thread block also leaves each thread
// more registers for them.
//
// The block copies its tiles as step 5 does (16-byte loads, k-major padded tiles), but each thread starts
// all of a step's loads before it stores any: 128 threads are half of step 5's warps, too few to hide one
// load's latency after another.
#include "ladder.cuh"  // launch_matmul_nt, launch_tiles, WarpTiles, fetch_tile, stash_tile, copy4, store_warp_tiles

namespace KPLAY_NS {

constexpr int BM = {{block_m}};   // rows of C per block
constexpr int BN = {{block_n}};   // columns of C per block
constexpr int BK = {{block_k}};   // k per shared-memory step
constexpr int WM = {{warp_m}};    // rows of C per warp
constexpr int WN = {{warp_n}};    // columns of C per warp
constexpr int TM = {{thread_m}};  // rows of C per thread, per sub-tile
constexpr int TN = {{thread_n}};  // columns of C per thread, per sub-tile
using W = WarpTiles<BM, BN, BK, WM, WN, TM, TN>;  // what they make: threads, sub-tiles, loads (ladder.cuh)
static_assert((BM + BN + 2 * W::PAD) * BK * sizeof(double) <= 48 * 1024,
              "the float64 tiles exceed the 48 KB of static shared memory a block may have");

template <typename T>
__global__ void __launch_bounds__(W::THREADS)
matmul_nt_warptile(const T* __restrict__ A, int64_t lda,  // (M, K), row stride lda
                   const T* __restrict__ B, int64_t ldb,  // (N, K), row stride ldb
                   const T* __restrict__ bias,            // (N,) or nullptr
                   T* __restrict__ C, int64_t ldc,        // (M, N), row stride ldc
                   int M, int N, int K,
                   bool vec_a, bool vec_b, bool vec_c) {  // rows 16-byte aligned: float4 allowed
  __shared__ __align__(16) T As[BK][BM + W::PAD];
  __shared__ __align__(16) T Bs[BK][BN + W::PAD];

  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / W::WARPS_N) * WM, wn = (warp % W::WARPS_N) * WN;  // this warp's tile in the block's
  const int tr = lane / 4, tc = lane % 4;                                   // this lane in each sub-tile

  T acc[W::ITER_M * TM][W::ITER_N * TN] = {};  // ITER_M x ITER_N blocks of TM x TN outputs

  for (int k0 = 0; k0 < K; k0 += BK) {
    // This thread's share of the step's tiles (ladder.cuh): every load started before the first store,
    // so that their latencies overlap instead of adding up.
    T ra[W::LOADS_A][4], rb[W::LOADS_B][4];
    fetch_tile<BM, BK, W::THREADS>(A, lda, m0, k0, M, K, vec_a, ra);
    fetch_tile<BN, BK, W::THREADS>(B, ldb, n0, k0, N, K, vec_b, rb);
    stash_tile<BM, BK, W::THREADS>(ra, As);
    stash_tile<BN, BK, W::THREADS>(rb, Bs);
    __syncthreads();  // the tiles are complete

    // kplay:todo Per k: a = As[k][wm + si * W::SUB_M + tr * TM + i], b = Bs[k][wn + sj * W::SUB_N + tc * TN + j].
    // kplay:why Then acc[si * TM + i][sj * TN + j] += a * b for every sub-tile si, sj of the warp's (copy4). A warp
    // kplay:why reads only its own slice of the tiles, each lane whole 16-byte rows: 6 loads feed 128 multiply-adds.
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      T a[W::ITER_M * TM], b[W::ITER_N * TN];
#pragma unroll
      for (int si = 0; si < W::ITER_M; ++si)
#pragma unroll
        for (int i = 0; i < TM; i += 4) copy4(a + si * TM + i, &As[k][wm + si * W::SUB_M + tr * TM + i]);
#pragma unroll
      for (int sj = 0; sj < W::ITER_N; ++sj)
#pragma unroll
        for (int j = 0; j < TN; j += 4) copy4(b + sj * TN + j, &Bs[k][wn + sj * W::SUB_N + tc * TN + j]);
#pragma unroll
      for (int i = 0; i < W::ITER_M * TM; ++i)
#pragma unroll
        for (int j = 0; j < W::ITER_N * TN; ++j) acc[i][j] += a[i] * b[j];
    }
    // kplay:end
    __syncthreads();  // everyone is done with the tiles before the next step overwrites them
  }

  store_warp_tiles<TM, TN, W::SUB_M, W::SUB_N>(acc, bias, C, ldc, M, N, m0 + wm + tr * TM, n0 + wn + tc * TN, vec_c);
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  return launch_tiles<BM, BN>(matmul_nt_warptile<T>, W::THREADS, 0, A, lda, B, ldb, bias, C, ldc, M, N, K, stream);
}

}  // namespace KPLAY_NS
