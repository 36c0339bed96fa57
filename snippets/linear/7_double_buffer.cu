// Step 7 of the matmul ladder (cuda-double-buffer): the next step's tiles in flight while this one is used.
// From step 6: two copies of the tiles in shared memory, one __syncthreads a step instead of two.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. Step 6's params.
// There, every step of k waits: the block loads its tiles, synchronizes, multiplies, synchronizes
// again, and only then asks global memory for the next tiles, whose latency nothing hides but other blocks
// on the SM. Here, while the block multiplies out of one copy, each thread's loads of the next step's
// slices are already in flight into registers; after the multiply they are stored into the other copy:
// global latency overlapped with the math. Two copies of the tiles need more shared memory than a block
// may declare statically (48 KB in float64), so they live in dynamic shared memory, allowed in the launcher.
// Its default tiles: 8 warps of 64 x 32 on 128 x 128 of C, two blocks an SM, so that one block's sync hides
// behind the other's math. One block of 256 x 128 reads less of A and B per multiply, and ran slower
// (docs/kernels.md); at 512 threads a thread gets 128 registers, and float64's sums go to the stack.
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
static_assert(W::LOADS_A * W::THREADS * 4 == BM * BK && W::LOADS_B * W::THREADS * 4 == BN * BK,
              "every thread moves as many 4-vectors of a tile (block * block_k / 4 a multiple of the threads)");

template <typename T>
constexpr int smem_bytes() { return 2 * BK * (BM + BN + 2 * W::PAD) * int(sizeof(T)); }
static_assert(smem_bytes<double>() <= 227 * 1024,
              "the float64 tiles' two copies exceed the 227 KB of shared memory a block may have");

// Two blocks an SM where a block is 256 threads or fewer, in float32: at most 128 registers a thread (float64
// needs more, and one block an SM it is).
template <typename T>
constexpr int blocks_per_sm() { return sizeof(T) == 4 && W::THREADS <= 256 ? 2 : 1; }

template <typename T>
__global__ void __launch_bounds__(W::THREADS, blocks_per_sm<T>())
matmul_nt_double_buffer(const T* __restrict__ A, int64_t lda,  // (M, K), row stride lda
                        const T* __restrict__ B, int64_t ldb,  // (N, K), row stride ldb
                        const T* __restrict__ bias,            // (N,) or nullptr
                        T* __restrict__ C, int64_t ldc,        // (M, N), row stride ldc
                        int M, int N, int K,
                        bool vec_a, bool vec_b, bool vec_c) {  // rows 16-byte aligned: float4 allowed
  extern __shared__ __align__(16) unsigned char smem[];
  auto As = reinterpret_cast<T (*)[BK][BM + W::PAD]>(smem);                                      // As[copy][k][m]
  auto Bs = reinterpret_cast<T (*)[BK][BN + W::PAD]>(smem + 2 * BK * (BM + W::PAD) * sizeof(T));  // Bs[copy][k][n]

  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / W::WARPS_N) * WM, wn = (warp % W::WARPS_N) * WN;
  const int tr = lane / 4, tc = lane % 4;

  // This thread's share of a step's tiles: LOADS_A 4-vectors of A and LOADS_B of B, in registers.
  T ra[W::LOADS_A][4], rb[W::LOADS_B][4];
  auto fetch = [&](int k0) {  // global -> registers: the loads start, nothing waits for them yet
    fetch_tile<BM, BK, W::THREADS>(A, lda, m0, k0, M, K, vec_a, ra);
    fetch_tile<BN, BK, W::THREADS>(B, ldb, n0, k0, N, K, vec_b, rb);
  };
  auto stash = [&](int copy) {  // registers -> shared memory, k-major
    stash_tile<BM, BK, W::THREADS>(ra, As[copy]);
    stash_tile<BN, BK, W::THREADS>(rb, Bs[copy]);
  };

  T acc[W::ITER_M * TM][W::ITER_N * TN] = {};
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
      T a[W::ITER_M * TM], b[W::ITER_N * TN];
#pragma unroll
      for (int si = 0; si < W::ITER_M; ++si)
#pragma unroll
        for (int i = 0; i < TM; i += 4) copy4(a + si * TM + i, &As[copy][k][wm + si * W::SUB_M + tr * TM + i]);
#pragma unroll
      for (int sj = 0; sj < W::ITER_N; ++sj)
#pragma unroll
        for (int j = 0; j < TN; j += 4) copy4(b + sj * TN + j, &Bs[copy][k][wn + sj * W::SUB_N + tc * TN + j]);
      // b[j] outer: consecutive FFMAs share it, so it stays in the operand reuse cache and the other two
      // sources never wait on one register bank (i outer, 49 of the 1,024 FFMAs a step did: sass_loop.py)
#pragma unroll
      for (int j = 0; j < W::ITER_N * TN; ++j)
#pragma unroll
        for (int i = 0; i < W::ITER_M * TM; ++i) acc[i][j] += a[i] * b[j];
    }
    // kplay:todo If more steps follow, stash(copy ^ 1): the fetched tiles into the other copy.
    // kplay:why Everyone finished reading that copy before the last sync; the next sync completes it.
    if (more) stash(copy ^ 1);
    // kplay:end
    __syncthreads();  // this copy is free again, and the other is complete
  }

  store_warp_tiles<TM, TN, W::SUB_M, W::SUB_N>(acc, bias, C, ldc, M, N, m0 + wm + tr * TM, n0 + wn + tc * TN, vec_c);
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  // Above 48 KB a kernel must ask for its dynamic shared memory (on the current GPU: asked at every launch).
  const cudaError_t allowed = cudaFuncSetAttribute(matmul_nt_double_buffer<T>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<T>());
  if (allowed != cudaSuccess) return cudaGetErrorString(allowed);
  return launch_tiles<BM, BN>(matmul_nt_double_buffer<T>, W::THREADS, smem_bytes<T>(), A, lda, B, ldb, bias, C, ldc,
                              M, N, K, stream);
}

}  // namespace KPLAY_NS
