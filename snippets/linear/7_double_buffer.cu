// Rung 7 of the matmul ladder: double buffering, the next tiles on their way while this one is used.
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W.
//
// cuda-warptile, with the same tiles and --params (wt_*). There, every step of k waits: the block loads
// its tiles, synchronizes, multiplies, synchronizes again, and only then asks global memory for the
// next tiles, whose latency (~600 ns) nothing hides but other blocks on the SM. The one idea: two copies
// of each tile in shared memory. While the block multiplies out of one, each thread's loads of the next
// step's slices are already in flight into registers; after the multiply they are stored into the other
// copy. One __syncthreads a step instead of two, and global latency overlapped with the math.
// Two copies of the tiles need more shared memory than a block may declare statically (48 KB in
// float64), so they live in dynamic shared memory, set up once per type in the launcher.
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
constexpr int PAD = 4;
constexpr int LOADS_A = BM * BK / 4 / THREADS, LOADS_B = BN * BK / 4 / THREADS;  // 4-vectors per thread a step
static_assert(BM % WM == 0 && BN % WN == 0, "a block tile is a whole number of warp tiles");
static_assert(WM % SUB_M == 0 && WN % SUB_N == 0,
              "a warp tile is a whole number of sub-tiles (8 wt_thread_m x 4 wt_thread_n)");
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "threads move 4-vectors");
static_assert(THREADS <= 1024, "at most 32 warps per block");
static_assert(LOADS_A * THREADS * 4 == BM * BK && LOADS_B * THREADS * 4 == BN * BK,
              "every thread moves as many 4-vectors of a tile (block * wt_block_k / 4 a multiple of the threads)");

template <typename T>
constexpr int smem_bytes() { return 2 * BK * (BM + BN + 2 * PAD) * int(sizeof(T)); }
static_assert(smem_bytes<double>() <= 227 * 1024,
              "the float64 tiles' two copies exceed the 227 KB of shared memory a block may have");

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_double_buffer(const T* __restrict__ A, int64_t lda,  // (M, K), row stride lda
                        const T* __restrict__ B, int64_t ldb,  // (N, K), row stride ldb
                        const T* __restrict__ bias,            // (N,) or nullptr
                        T* __restrict__ C, int64_t ldc,        // (M, N), row stride ldc
                        int M, int N, int K,
                        bool vec_a, bool vec_b, bool vec_c) {  // rows 16-byte aligned: float4 allowed
  extern __shared__ __align__(16) unsigned char smem[];
  auto As = reinterpret_cast<T (*)[BK][BM + PAD]>(smem);                               // As[copy][k][m]
  auto Bs = reinterpret_cast<T (*)[BK][BN + PAD]>(smem + 2 * BK * (BM + PAD) * sizeof(T));  // Bs[copy][k][n]

  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
  const int tr = lane / 4, tc = lane % 4;

  // This thread's share of a step's tiles: LOADS_A 4-vectors of A and LOADS_B of B, in registers.
  T ra[LOADS_A][4], rb[LOADS_B][4];
  auto fetch = [&](int k0) {  // global -> registers: the loads start, nothing waits for them yet
    fetch_tile<BM, BK, THREADS>(A, lda, m0, k0, M, K, vec_a, ra);
    fetch_tile<BN, BK, THREADS>(B, ldb, n0, k0, N, K, vec_b, rb);
  };
  auto stash = [&](int copy) {  // registers -> shared memory, k-major
    stash_tile<BM, BK, THREADS>(ra, As[copy]);
    stash_tile<BN, BK, THREADS>(rb, Bs[copy]);
  };

  T acc[ITER_M * TM][ITER_N * TN] = {};
  fetch(0);
  stash(0);
  __syncthreads();  // the first tiles are complete
  for (int k0 = 0, copy = 0; k0 < K; k0 += BK, copy ^= 1) {
    const bool more = k0 + BK < K;
    // kplay:todo If more steps follow, fetch(k0 + BK): the next tiles' loads, started before the multiply.
    // kplay:why They are in flight while this copy is multiplied: the math hides their latency.
    if (more) fetch(k0 + BK);
    // kplay:end
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      T a[ITER_M * TM], b[ITER_N * TN];
#pragma unroll
      for (int si = 0; si < ITER_M; ++si)
#pragma unroll
        for (int i = 0; i < TM; i += 4) copy4(a + si * TM + i, &As[copy][k][wm + si * SUB_M + tr * TM + i]);
#pragma unroll
      for (int sj = 0; sj < ITER_N; ++sj)
#pragma unroll
        for (int j = 0; j < TN; j += 4) copy4(b + sj * TN + j, &Bs[copy][k][wn + sj * SUB_N + tc * TN + j]);
#pragma unroll
      for (int i = 0; i < ITER_M * TM; ++i)
#pragma unroll
        for (int j = 0; j < ITER_N * TN; ++j) acc[i][j] += a[i] * b[j];
    }
    // kplay:todo If more steps follow, stash(copy ^ 1): the fetched tiles into the other copy.
    // kplay:why Everyone finished reading that copy before the last sync; the next sync completes it.
    if (more) stash(copy ^ 1);
    // kplay:end
    __syncthreads();  // this copy is free again, and the other is complete
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
  // Above 48 KB a kernel must ask for its dynamic shared memory (on the current GPU: asked at every launch).
  const cudaError_t allowed = cudaFuncSetAttribute(matmul_nt_double_buffer<T>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<T>());
  if (allowed != cudaSuccess) return cudaGetErrorString(allowed);
  dim3 blocks;
  if (const char* err = tile_grid(M, N, BM, BN, blocks)) return err;
  matmul_nt_double_buffer<T><<<blocks, THREADS, smem_bytes<T>(), stream>>>(
      A, lda, B, ldb, bias, C, ldc, int(M), int(N), int(K), rows_aligned(A, lda), rows_aligned(B, ldb),
      rows_aligned(C, ldc));
  return launch_error();
}

}  // namespace KPLAY_NS
