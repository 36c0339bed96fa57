// Step 11 of the matmul ladder (cuda-wgmma): Hopper's warpgroup multiply, its operands read from shared memory.
// From step 10: wgmma in place of ldmatrix + mma.sync; four warps multiply as one. Built for sm_90a only.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. On Hopper, mma.sync
// (steps 8-10) reaches about two thirds of the tensor cores: each warp must first move its fragments from
// shared memory into registers (ldmatrix), and those loads compete with the multiplies for the schedulers. wgmma
// is started by a warpgroup (4 consecutive warps, 128 threads) and reads A and B from shared memory itself,
// through a 64-bit descriptor per operand (hopper.cuh's smem_descriptor: where the tile starts, how its rows
// are laid out). One wgmma m64n128k16 is 131,072 multiply-adds, and it is asynchronous: the warpgroup starts
// a step's four, commits them as a group, and waits only for the group before (wgmma_wait<1>), so one step's
// multiply runs while the warps wait for the next stage and start its copies. Waiting for each step's own
// group leaves the tensor cores idle through every sync and copy.
//
// A block of 2 warpgroups computes a 128 x 128 tile of C, each a 64 x 128 piece (64 float32 sums per thread).
// The tiles arrive as in step 10 (cp.async, the 128-byte swizzle, which wgmma reads directly), 5 stages with
// copies 3 ahead: a stage is refilled once the multiply two steps back is done, not the one just started.
// One more fence: cp.async writes through the generic proxy, wgmma reads through the async proxy.
#include "hopper.cuh"  // smem_descriptor, wgmma_step, fence_proxy_async; tensor.cuh's TileCopy, ...

namespace KPLAY_NS {

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 5;  // k per stage: one 128-byte row; copies STAGES - 2 ahead
constexpr int GROUPS = BM / 64, THREADS = 128 * GROUPS;  // a warpgroup per 64 rows of the tile
constexpr int STAGE = (BM + BN) * BK;                     // values in one stage: A's tile, then B's

template <typename T>
__device__ __forceinline__ void copy_stage(T* s, const T* A, int64_t lda, const T* B, int64_t ldb, int m0, int n0,
                                           int k0, int M, int N, int K) {
  TileCopy<BM, THREADS, T>(A, lda, m0, M, threadIdx.x)(reinterpret_cast<uint4*>(s), k0, K);
  TileCopy<BN, THREADS, T>(B, ldb, n0, N, threadIdx.x)(reinterpret_cast<uint4*>(s + BM * BK), k0, K);
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_wgmma(const T* __restrict__ A, int64_t lda, const T* __restrict__ B, int64_t ldb,
                const T* __restrict__ bias, T* __restrict__ C, int64_t ldc, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem[];
  T* stages = tiles_start<T>(smem);  // 1,024-byte aligned: the swizzle's period
  const int group = threadIdx.x / 128, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, steps = (K + BK - 1) / BK;
  float d[BN / 2] = {};  // this thread's sums: 64 x 128 per warpgroup over 128 threads

#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < steps) copy_stage(stages + s * STAGE, A, lda, B, ldb, m0, n0, s * BK, M, N, K);
    cp_async_commit();
  }
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<STAGES - 3>();
    fence_proxy_async();  // this thread's copies, visible to wgmma
    __syncthreads();      // everyone's; and every warpgroup is done with the stage reused below
    const int next = step + STAGES - 2;
    if (next < steps) copy_stage(stages + next % STAGES * STAGE, A, lda, B, ldb, m0, n0, next * BK, M, N, K);
    cp_async_commit();
    const T* As = stages + step % STAGES * STAGE + group * 64 * BK;  // this warpgroup's 64 rows of A
    const T* Bs = stages + step % STAGES * STAGE + BM * BK;
    // kplay:todo wgmma_fence(); per kk += 16: wgmma_step<BN, T> of smem_descriptor(As + kk), (Bs + kk); commit; wait<1>
    // kplay:why A descriptor's start moves 32 bytes along the row per kk; the hardware applies the swizzle. wait<1>
    // kplay:why leaves this group running: the one before is done, so the next loop's sync frees the stage it read.
    fence_registers(d);  // the sums' last ordinary writes (the zeros) stay before the fence
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) wgmma_step<BN, T>(d, smem_descriptor(As + kk), smem_descriptor(Bs + kk), 1);
    wgmma_commit();
    wgmma_wait<1>();
    // kplay:end
    fence_registers(d);
  }
  cp_async_wait<0>();
  wgmma_wait<0>();  // the last step's multiply
  fence_registers(d);
  const int warp = threadIdx.x % 128 / 32;  // rows 16 warp .. + 15 of the warpgroup's 64
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
  if (M > INT32_MAX - BM || N > INT32_MAX - BN || K > INT32_MAX - BK) return "linear: a dimension exceeds 2^31 - 129";
  if (compute_capability() != 90) return "linear: cuda-wgmma needs wgmma, compute capability 9.0 (Hopper)";
  if ((M + BM - 1) / BM > 65535) return "linear: batch too large for one grid (gridDim.y <= 65535)";
  constexpr int bytes = STAGES * STAGE * sizeof(T) + 1024;  // 160 KB, and room to align the first tile
  if (cudaFuncSetAttribute(matmul_nt_wgmma<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    return launch_error();
  }
  const dim3 blocks(unsigned((N + BN - 1) / BN), unsigned((M + BM - 1) / BM));
  matmul_nt_wgmma<T><<<blocks, THREADS, bytes, stream>>>(A, lda, B, ldb, bias, C, ldc, int(M), int(N), int(K));
  return launch_error();
}

}  // namespace KPLAY_NS
