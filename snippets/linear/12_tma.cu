// Step 12 of the matmul ladder (cuda-tma): the copy engine (TMA) moves whole tiles, completing on mbarriers.
// From step 11: one thread starts a tile's copy, the warps wait on its barrier; a wider tile. sm_90a only.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. In step 11 every thread
// computes addresses and starts 16-byte cp.async copies: instructions the warps spend beside the multiplies.
// The Tensor Memory Accelerator copies a whole box of a matrix (64 values x up to 256 rows) from a tensor map
// (made once on the host: the matrix's base, sizes, row stride, the box and its swizzle), fills rows and
// columns past the matrix with zeros, and counts the bytes it delivers on an mbarrier in shared memory. One
// thread says how many bytes a stage expects (arrive.expect_tx) and starts its two copies; the warpgroups wait
// on the stage's barrier, for the phase its use is in (parity 0, 1, 0, ...).
//
// With the loads off the warps' hands, the block's tile grows to 128 x 256: two warpgroups each multiply
// 64 x 256 (wgmma m64n256k16, 128 sums per thread), and each tile of B read from shared memory feeds twice
// the multiply-adds of step 11. 4 stages of 48 KB. Each step's multiply is waited for before the next
// (wgmma_wait<0>): with one left running, as in step 11, 4 stages would keep the copies only 2 steps ahead;
// step 13 overlaps the two another way, with a warpgroup that only copies.
#include "hopper.cuh"  // tma_load, tensor_map, mbarrier_*, wgmma_step, smem_descriptor

namespace KPLAY_NS {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;
constexpr int GROUPS = BM / 64, THREADS = 128 * GROUPS;
constexpr int STAGE = (BM + BN) * BK;                      // values in one stage: A's tile, then B's
constexpr int STAGE_BYTES = STAGE * 2;                      // what a stage's barrier expects: 48 KB

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_tma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
              const T* __restrict__ bias, T* __restrict__ C, int64_t ldc, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem[];
  T* stages = tiles_start<T>(smem);  // 1,024-byte aligned: the swizzle's period
  __shared__ alignas(8) uint64_t full[STAGES];  // a stage's copies have landed
  const int group = threadIdx.x / 128, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, steps = (K + BK - 1) / BK;
  auto fetch = [&](int step) {  // one thread: the stage's expected bytes, then its two copies
    T* s = stages + step % STAGES * STAGE;
    mbarrier_arrive_expect(&full[step % STAGES], STAGE_BYTES);
    tma_load(s, &map_a, step * BK, m0, &full[step % STAGES]);
    tma_load(s + BM * BK, &map_b, step * BK, n0, &full[step % STAGES]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbarrier_init(&full[s], 1);
    mbarrier_init_fence();
    for (int s = 0; s < STAGES - 1 && s < steps; ++s) fetch(s);
  }
  float d[BN / 2] = {};

  for (int step = 0; step < steps; ++step) {
    // kplay:todo Sync, let thread 0 fetch step + STAGES - 1, then wait on this step's barrier for its phase.
    // kplay:why The sync says every warpgroup is done with the stage the fetch reuses (the last step's). A
    // kplay:why stage's barrier completes once per use: its phase is step / STAGES, its parity that % 2.
    __syncthreads();
    if (threadIdx.x == 0 && step + STAGES - 1 < steps) fetch(step + STAGES - 1);
    mbarrier_wait(&full[step % STAGES], step / STAGES % 2);
    // kplay:end
    __syncwarp();  // the lanes leave the wait's loop apart: wgmma's .aligned wants the warp whole
    const T* As = stages + step % STAGES * STAGE + group * 64 * BK;
    const T* Bs = stages + step % STAGES * STAGE + BM * BK;
    fence_registers(d);  // the sums' last ordinary writes (the zeros) stay before the fence
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) wgmma_step<BN, T>(d, smem_descriptor(As + kk), smem_descriptor(Bs + kk), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(d);
  }
  const int warp = threadIdx.x % 128 / 32;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    store_fragment(C, ldc, bias, m0 + group * 64 + warp * 16, n0 + j * 8, M, N, d + 4 * j);
  }
#else
  __trap();  // built for sm_90a alone: kplay refuses another GPU before the build
#endif
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write; an empty grid is a launch error
  if (M > INT32_MAX - BN || N > INT32_MAX - BN || K > INT32_MAX - BK) return "linear: a dimension exceeds 2^31 - 257";
  if (compute_capability() != 90) return "linear: cuda-tma needs TMA and wgmma, compute capability 9.0 (Hopper)";
  if ((M + BM - 1) / BM > 65535) return "linear: batch too large for one grid (gridDim.y <= 65535)";
  CUtensorMap map_a{}, map_b{};  // K == 0: no step reads them, and C is the bias
  if (K > 0) {
    if (const char* err = tensor_map(&map_a, A, M, K, lda, BM)) return err;
    if (const char* err = tensor_map(&map_b, B, N, K, ldb, BN)) return err;
  }
  constexpr int bytes = STAGES * STAGE_BYTES + 1024;  // 192 KB, and room to align the first tile
  if (cudaFuncSetAttribute(matmul_nt_tma<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    return launch_error();
  }
  const dim3 blocks(unsigned((N + BN - 1) / BN), unsigned((M + BM - 1) / BM));
  matmul_nt_tma<T><<<blocks, THREADS, bytes, stream>>>(map_a, map_b, bias, C, ldc, int(M), int(N), int(K));
  return launch_error();
}

}  // namespace KPLAY_NS
