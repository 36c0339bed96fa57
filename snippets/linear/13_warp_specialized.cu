// Step 13 of the matmul ladder (cuda-warp-specialized): a producer warpgroup, two consumers, a persistent grid.
// From step 12: roles in place of one loop for all, a stage freed once it is used, tile after tile per block.
// Built for sm_90a only.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. In step 12 every warp
// waits at a __syncthreads each step before the next copy may start, and the tensor cores idle while a block
// stores its tile and the next block starts. Here warpgroup 0 only copies: one of its threads walks the
// stages, waits until a stage is empty (its `empty` barrier), and starts its TMA copies; warpgroups 1 and 2
// only multiply: each waits until a stage is full, multiplies, and arrives on its empty barrier. Nobody waits
// for anyone else's step. The producer gives up registers it does not need (setmaxnreg.dec to 40), the
// consumers take them (to 232) for their 128 sums and the addresses around them.
//
// The grid is one block per SM, and each block takes tile after tile of C (blockIdx.x, + gridDim.x, ...):
// while the consumers store one tile, the producer already fills the stages with the next. Tiles are taken
// in groups of GROUP_M rows of tiles, column by column within a group, so the tiles in flight at once share
// their rows of A and columns of B in L2.
#include "hopper.cuh"  // tma_load, tensor_map, mbarrier_*, wgmma_m64k16, smem_descriptor, setmaxnreg_*

namespace KPLAY_NS {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, GROUP_M = 8;
constexpr int CONSUMERS = BM / 64, THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies, the others multiply
constexpr int STAGE = (BM + BN) * BK, STAGE_BYTES = STAGE * 2;

// The tile-th tile of C in the grouped order: (its first row, its first column).
__device__ __forceinline__ int2 tile_origin(int tile, int tiles_m, int tiles_n) {
  const int group = tile / (GROUP_M * tiles_n), first = group * GROUP_M;
  const int rows = min(tiles_m - first, GROUP_M), in_group = tile % (GROUP_M * tiles_n);
  return make_int2((first + in_group % rows) * BM, in_group / rows * BN);
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1)
matmul_nt_warp_specialized(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                           const T* __restrict__ bias, T* __restrict__ C, int64_t ldc, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem[];
  T* stages = tiles_start<T>(smem);  // 1,024-byte aligned: the swizzle's period
  __shared__ alignas(8) uint64_t full[STAGES], empty[STAGES];
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, steps = (K + BK - 1) / BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbarrier_init(&full[s], 1), mbarrier_init(&empty[s], CONSUMERS * 4);
    mbarrier_init_fence();
  }
  __syncthreads();
  const int role = threadIdx.x / 128;
  if (role == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x != 0) return;
    int use = 0;  // the stages' uses so far, over every tile: stage use % STAGES, its round use / STAGES
    for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
      const int2 at = tile_origin(tile, tiles_m, tiles_n);
      for (int step = 0; step < steps; ++step, ++use) {
        const int s = use % STAGES, round = use / STAGES;
        if (round > 0) mbarrier_wait(&empty[s], (round - 1) % 2);  // round r waits for the release in round r - 1
        // kplay:todo Fill stage s: expect STAGE_BYTES on its full barrier, and copy A's and B's tiles into it.
        // kplay:why The phase completes when the producer has arrived and the copies' bytes have landed; an
        // kplay:why arrival alone lets the consumers multiply whatever the stage held.
        mbarrier_arrive_expect(&full[s], STAGE_BYTES);
        tma_load(stages + s * STAGE, &map_a, step * BK, at.x, &full[s]);
        tma_load(stages + s * STAGE + BM * BK, &map_b, step * BK, at.y, &full[s]);
        // kplay:stub
        // mbarrier_arrive(&full[s]);  // in place of the copies (replace it): the stage's old contents are multiplied
        // kplay:end
      }
    }
    return;
  }
  setmaxnreg_inc<232>();
  const int group = role - 1, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  int use = 0;
  for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    const int2 at = tile_origin(tile, tiles_m, tiles_n);
    float d[BN / 2] = {};
    for (int step = 0; step < steps; ++step, ++use) {
      const int s = use % STAGES;
      mbarrier_wait(&full[s], use / STAGES % 2);
      __syncwarp();  // the lanes leave the wait's loop apart: wgmma's .aligned wants the warp whole
      const T* As = stages + s * STAGE + group * 64 * BK;
      const T* Bs = stages + s * STAGE + BM * BK;
      fence_registers(d);  // the sums' last ordinary writes (the zeros) stay before the fence
    wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        wgmma_m64k16<BN, T>(d, smem_descriptor(As + kk), smem_descriptor(Bs + kk), 1);
      }
      wgmma_commit();
      // The last step's multiply is done once at most this one is pending: its stage goes back to the producer.
      wgmma_wait<1>();
      fence_registers(d);
      if (step > 0 && lane == 0) mbarrier_arrive(&empty[(use - 1) % STAGES]);
    }
    wgmma_wait<0>();
    fence_registers(d);
    if (steps > 0 && lane == 0) mbarrier_arrive(&empty[(use - 1) % STAGES]);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      store_fragment(C, ldc, bias, at.x + group * 64 + warp * 16, at.y + j * 8, M, N, d + 4 * j);
    }
  }
#else
  __trap();  // built for sm_90a alone: kplay refuses another GPU before the build
#endif
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write
  if (M > INT32_MAX - BN || N > INT32_MAX - BN || K > INT32_MAX - BK) return "linear: a dimension exceeds 2^31 - 257";
  if (compute_capability() != 90) return "linear: cuda-warp-specialized needs TMA and wgmma, compute capability 9.0";
  const int64_t tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  if (tiles > INT32_MAX) return "linear: too many tiles of C for one grid";
  CUtensorMap map_a{}, map_b{};  // K == 0: no step reads them, and C is the bias
  if (K > 0) {
    if (const char* err = tensor_map(&map_a, A, M, K, lda, BM)) return err;
    if (const char* err = tensor_map(&map_b, B, N, K, ldb, BN)) return err;
  }
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return launch_error();
  }
  constexpr int bytes = STAGES * STAGE_BYTES + 1024;  // 192 KB, and room to align the first tile
  auto* kernel = matmul_nt_warp_specialized<T>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    return launch_error();
  }
  const unsigned blocks = unsigned(tiles < sms ? tiles : sms);  // persistent: a block per SM, at most
  kernel<<<blocks, THREADS, bytes, stream>>>(map_a, map_b, bias, C, ldc, int(M), int(N), int(K));
  return launch_error();
}

}  // namespace KPLAY_NS
