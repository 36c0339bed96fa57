// Step 14 of the matmul ladder (cuda-cluster): two blocks in a cluster, each copying half of the B they share.
// From step 13: blocks paired in a thread-block cluster; a copy of B lands in both (TMA multicast).
// Built for sm_90a only.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. In step 13, two blocks on
// tiles of C in the same columns each copy the same 256 x 64 piece of B every step: L2 sends it twice. Here
// the grid is clusters of two blocks, on two SMs the hardware keeps close, and a cluster takes two tiles of C
// one above the other. Each block copies its own A and half of the B they share, and that half lands in the
// shared memory of both blocks at once, completing both blocks' full barriers. So a stage may be refilled
// only when the consumers of both blocks are done with it: each consumer warp arrives on the empty barrier of
// its own block and on its neighbour's (lane 0 on rank 0's, lane 1 on rank 1's). The cluster syncs once before
// the first copy (no copy may reach a barrier its neighbour has not set up), and each producer waits, last,
// until every stage is empty again: the neighbour's consumers arrive on this block's barriers until then, and
// the block must still be there.
#include "hopper.cuh"  // tma_load(_multicast), tensor_map, mbarrier_*, cluster_*, wgmma_step, setmaxnreg_*

namespace KPLAY_NS {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, GROUP_M = 8, CLUSTER = 2;
constexpr int CONSUMERS = BM / 64, THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies, the others multiply
constexpr int STAGE = (BM + BN) * BK, STAGE_BYTES = STAGE * 2, HALF_B = BN / CLUSTER;

// The pair-th pair of tiles of C (CLUSTER tiles one above the other) in the grouped order: (its first row, its
// first column).
__device__ __forceinline__ int2 pair_origin(int pair, int pairs_m, int tiles_n) {
  const int group = pair / (GROUP_M * tiles_n), first = group * GROUP_M;
  const int rows = min(pairs_m - first, GROUP_M), in_group = pair % (GROUP_M * tiles_n);
  return make_int2((first + in_group % rows) * BM * CLUSTER, in_group / rows * BN);
}

template <typename T>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
matmul_nt_cluster(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                  const T* __restrict__ bias, T* __restrict__ C, int64_t ldc, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem[];
  T* stages = tiles_start<T>(smem);  // 1,024-byte aligned, at the same place in both blocks
  __shared__ alignas(8) uint64_t full[STAGES], empty[STAGES];
  const int pairs_m = (M + BM * CLUSTER - 1) / (BM * CLUSTER), tiles_n = (N + BN - 1) / BN;
  const int steps = (K + BK - 1) / BK, pairs = pairs_m * tiles_n;
  const int rank = cluster_rank();  // which of the pair's tiles is this block's: rows rank * BM on
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbarrier_init(&full[s], 1), mbarrier_init(&empty[s], CLUSTER * CONSUMERS * 4);
    mbarrier_init_fence();
  }
  cluster_sync();  // both blocks' barriers are set up before any copy or arrival reaches them
  const int role = threadIdx.x / 128;
  if (role == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x != 0) return;
    int use = 0;  // the stages' uses so far, over every tile: stage use % STAGES, its round use / STAGES
    for (int pair = blockIdx.x / CLUSTER; pair < pairs; pair += gridDim.x / CLUSTER) {
      const int2 at = pair_origin(pair, pairs_m, tiles_n);
      for (int step = 0; step < steps; ++step, ++use) {
        const int s = use % STAGES, round = use / STAGES;
        if (round > 0) mbarrier_wait(&empty[s], (round - 1) % 2);
        // kplay:todo Expect STAGE_BYTES on stage s's full barrier; copy A, and B's half `rank` to both blocks.
        // kplay:why Both blocks' full barriers expect the whole stage: their A, their half of B and their
        // kplay:why neighbour's half, which tma_load_multicast(..., 0b11) sends to the same place in each.
        mbarrier_arrive_expect(&full[s], STAGE_BYTES);
        T* stage = stages + s * STAGE;
        tma_load(stage, &map_a, step * BK, at.x + rank * BM, &full[s]);
        tma_load_multicast(stage + (BM + rank * HALF_B) * BK, &map_b, step * BK, at.y + rank * HALF_B, &full[s],
                           (1 << CLUSTER) - 1);
        // kplay:stub
        // mbarrier_arrive(&full[s]);  // in place of the copies (replace it): the stage's old contents are multiplied
        // kplay:end
      }
    }
    // The neighbour's consumers arrive on this block's empty barriers up to its last stage: wait for them all.
    for (int u = use < STAGES ? 0 : use - STAGES; u < use; ++u) mbarrier_wait(&empty[u % STAGES], u / STAGES % 2);
    return;
  }
  setmaxnreg_inc<232>();
  const int group = role - 1, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  int use = 0;
  for (int pair = blockIdx.x / CLUSTER; pair < pairs; pair += gridDim.x / CLUSTER) {
    const int2 at = pair_origin(pair, pairs_m, tiles_n);
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
        wgmma_step<BN, T>(d, smem_descriptor(As + kk), smem_descriptor(Bs + kk), 1);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the last step's multiply is done
      fence_registers(d);
      // The last step's stage is free here: lane r of each warp says so to the block of rank r, this or the other.
      if (step > 0 && lane < CLUSTER) mbarrier_arrive_cluster(&empty[(use - 1) % STAGES], lane);
    }
    wgmma_wait<0>();
    fence_registers(d);
    if (steps > 0 && lane < CLUSTER) mbarrier_arrive_cluster(&empty[(use - 1) % STAGES], lane);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      store_fragment(C, ldc, bias, at.x + rank * BM + group * 64 + warp * 16, at.y + j * 8, M, N, d + 4 * j);
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
  if (M > INT32_MAX - 2 * BM || N > INT32_MAX - BN || K > INT32_MAX - BK) {
    return "linear: a dimension exceeds 2^31 - 257";
  }
  if (compute_capability() != 90) return "linear: cuda-cluster needs clusters, TMA and wgmma, compute capability 9.0";
  const int64_t pairs = ((M + 2 * BM - 1) / (2 * BM)) * ((N + BN - 1) / BN);
  if (pairs > INT32_MAX / CLUSTER) return "linear: too many tiles of C for one grid";
  CUtensorMap map_a{}, map_b{};  // K == 0: no step reads them, and C is the bias
  if (K > 0) {
    if (const char* err = tensor_map(&map_a, A, M, K, lda, BM)) return err;
    if (const char* err = tensor_map(&map_b, B, N, K, ldb, HALF_B)) return err;  // a block copies half of B's tile
  }
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return launch_error();
  }
  constexpr int bytes = STAGES * STAGE_BYTES + 1024;  // 192 KB, and room to align the first tile
  auto* kernel = matmul_nt_cluster<T>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    return launch_error();
  }
  // Persistent: as many clusters as fit at once (a cluster's two SMs come from one GPC), a pair of tiles each.
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(sms / CLUSTER * CLUSTER), config.blockDim = dim3(THREADS), config.dynamicSmemBytes = bytes;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess || clusters < 1) {
    (void)cudaGetLastError();  // no answer: a cluster per two SMs
    clusters = sms / CLUSTER;
  }
  const unsigned blocks = CLUSTER * unsigned(pairs < clusters ? pairs : clusters);
  kernel<<<blocks, THREADS, bytes, stream>>>(map_a, map_b, bias, C, ldc, int(M), int(N), int(K));
  return launch_error();
}

}  // namespace KPLAY_NS
