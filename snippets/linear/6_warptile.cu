// Rung 6 of the matmul ladder: warptiling, a tile per warp between the block's and the thread's.
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W.
//
// The block copies its tiles as cuda-tiled does (16-byte loads, k-major padded tiles), each thread's
// loads of a step all started before it stores any: 128 threads are half of cuda-tiled's warps, too few
// to hide one load's latency after another (that order ran at 0.68x cuda-tiled on an H200). The one idea:
// split the block's BM x BN tile of C into WM x WN tiles, one per warp, and each warp's into sub-tiles of
// 8 x 4 threads (each thread TM x TN outputs) that the warp walks WM / (8 TM) x WN / (4 TN) times. A
// thread's outputs are then a few small blocks, each a whole 16-byte row of registers, that all 32
// lanes read from shared memory in step: one warp touches a (WM + WN) x BK slice of the tiles, not the
// whole block's, and with TM = 8, TN = 4, WM = WN = 64 a thread makes 8 x 16 = 128 products per
// (8 + 16) / 4 = 6 float4 loads from shared memory: 6 load instructions per 128 multiply-adds
// (cuda-tiled: 4 per 64). The 128-thread block also leaves each thread more registers for them.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace KPLAY_NS {

#include "launch.cuh"   // tile_grid, launch_error
#include "tile_io.cuh"  // fetch_tile, stash_tile, copy4, store_warp_tiles, rows_aligned

constexpr int BM = {{wt_block_m}};   // rows of C per block
constexpr int BN = {{wt_block_n}};   // columns of C per block
constexpr int BK = {{wt_block_k}};   // k per shared-memory step
constexpr int WM = {{wt_warp_m}};    // rows of C per warp
constexpr int WN = {{wt_warp_n}};    // columns of C per warp
constexpr int TM = {{wt_thread_m}};  // rows of C per thread, per sub-tile
constexpr int TN = {{wt_thread_n}};  // columns of C per thread, per sub-tile
constexpr int WARPS_N = BN / WN;
constexpr int THREADS = (BM / WM) * WARPS_N * 32;
constexpr int SUB_M = 8 * TM, SUB_N = 4 * TN;  // a warp's sub-tile: its 32 lanes as 8 rows x 4 columns
constexpr int ITER_M = WM / SUB_M, ITER_N = WN / SUB_N;  // sub-tiles per warp tile
constexpr int PAD = 4;  // shifts each k-row of a tile by 4 banks, as in cuda-tiled
constexpr int LOADS_A = (BM * BK / 4 + THREADS - 1) / THREADS;  // 4-vectors of a step's tile of A per thread
constexpr int LOADS_B = (BN * BK / 4 + THREADS - 1) / THREADS;  // and of B
static_assert(BM % WM == 0 && BN % WN == 0, "a block tile is a whole number of warp tiles");
static_assert(WM % SUB_M == 0 && WN % SUB_N == 0,
              "a warp tile is a whole number of sub-tiles (8 wt_thread_m x 4 wt_thread_n)");
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "threads move 4-vectors");
static_assert(THREADS <= 1024, "at most 32 warps per block");
static_assert((BM + BN + 2 * PAD) * BK * sizeof(double) <= 48 * 1024,
              "the float64 tiles exceed the 48 KB of static shared memory a block may have");

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_warptile(const T* __restrict__ A, int64_t lda,  // (M, K), row stride lda
                   const T* __restrict__ B, int64_t ldb,  // (N, K), row stride ldb
                   const T* __restrict__ bias,            // (N,) or nullptr
                   T* __restrict__ C, int64_t ldc,        // (M, N), row stride ldc
                   int M, int N, int K,
                   bool vec_a, bool vec_b, bool vec_c) {  // rows 16-byte aligned: float4 allowed
  __shared__ __align__(16) T As[BK][BM + PAD];
  __shared__ __align__(16) T Bs[BK][BN + PAD];

  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;  // this warp's tile in the block's
  const int tr = lane / 4, tc = lane % 4;                             // this lane in each sub-tile

  T acc[ITER_M * TM][ITER_N * TN] = {};  // this thread's ITER_M x ITER_N blocks of TM x TN outputs

  for (int k0 = 0; k0 < K; k0 += BK) {
    // This thread's share of the step's tiles (tile_io.cuh): every load started before the first store,
    // so that their latencies overlap instead of adding up.
    T ra[LOADS_A][4], rb[LOADS_B][4];
    fetch_tile<BM, BK, THREADS>(A, lda, m0, k0, M, K, vec_a, ra);
    fetch_tile<BN, BK, THREADS>(B, ldb, n0, k0, N, K, vec_b, rb);
    stash_tile<BM, BK, THREADS>(ra, As);
    stash_tile<BN, BK, THREADS>(rb, Bs);
    __syncthreads();  // the tiles are complete

    // kplay:todo Per k: a = As[k][wm + si * SUB_M + tr * TM + i], b = Bs[k][wn + sj * SUB_N + tc * TN + j] (copy4).
    // kplay:why Then acc[si * TM + i][sj * TN + j] += a * b for every sub-tile si, sj of the warp's. A warp
    // kplay:why reads only its own slice of the tiles, each lane whole 16-byte rows: 6 loads feed 128 multiply-adds.
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      T a[ITER_M * TM], b[ITER_N * TN];
#pragma unroll
      for (int si = 0; si < ITER_M; ++si)
#pragma unroll
        for (int i = 0; i < TM; i += 4) copy4(a + si * TM + i, &As[k][wm + si * SUB_M + tr * TM + i]);
#pragma unroll
      for (int sj = 0; sj < ITER_N; ++sj)
#pragma unroll
        for (int j = 0; j < TN; j += 4) copy4(b + sj * TN + j, &Bs[k][wn + sj * SUB_N + tc * TN + j]);
#pragma unroll
      for (int i = 0; i < ITER_M * TM; ++i)
#pragma unroll
        for (int j = 0; j < ITER_N * TN; ++j) acc[i][j] += a[i] * b[j];
    }
    // kplay:end
    __syncthreads();  // everyone is done with the tiles before the next step overwrites them
  }

  store_warp_tiles<TM, TN, SUB_M, SUB_N>(acc, bias, C, ldc, M, N, m0 + wm + tr * TM, n0 + wn + tc * TN, vec_c);
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write; an empty grid is a launch error
  // int indices, and k0 + BK, n + 3 past the last tile: a margin below 2^31 keeps them from overflowing
  constexpr int64_t kMax = INT32_MAX - 1024;
  if (M > kMax || N > kMax || K > kMax) return "linear: a dimension exceeds 2^31 - 1025";
  dim3 blocks;
  if (const char* err = tile_grid(M, N, BM, BN, blocks)) return err;
  matmul_nt_warptile<T><<<blocks, THREADS, 0, stream>>>(
      A, lda, B, ldb, bias, C, ldc, int(M), int(N), int(K), rows_aligned(A, lda), rows_aligned(B, ldb),
      rows_aligned(C, ldc));
  return launch_error();
}

}  // namespace KPLAY_NS
