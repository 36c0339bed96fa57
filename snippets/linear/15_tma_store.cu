// Step 15 of the matmul ladder (cuda-tma-store): the tile of C leaves through shared memory and a TMA store.
// From step 14: the consumers stage their sums in shared memory, and the copy engine writes them to C.
// Built for sm_90a only.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. In step 14 a consumer
// ends each tile with 64 stores of 4 bytes per thread, 8 rows of 16 bytes per warp instruction, each to wait
// for in the memory pipeline while the tensor cores idle: the next tile's multiplies start only after. Here
// each consumer writes its 64 x 256 sums (plus the bias, rounded once) to shared memory, in the 128-byte
// swizzle (no bank conflicts), and one thread hands them to TMA in boxes of 64 x 64, which the copy engine
// writes to C while the warpgroup goes on to its next tile. Four stages of A and B (192 KB) leave room for
// 64 x 128 values a consumer (16 KB), so its sums go in two halves: the second is written once the engine
// has read the first (cp.async.bulk.wait_group.read), and the next tile's first once it has read the second.
// (Whole tiles leave room for three stages, and a grid of one round of tiles ran slower so: see
// benchmarks/probes/epilogue_probe.py.) A C whose rows are not 16-byte aligned is stored as in step 14.
#include "hopper.cuh"  // tma_load(_multicast), tma_store, bulk_*, tensor_map, mbarrier_*, cluster_*, wgmma_step

#include <atomic>

namespace KPLAY_NS {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, GROUP_M = 8, CLUSTER = 2;
constexpr int CONSUMERS = BM / 64, THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies, the others multiply
constexpr int STAGE = (BM + BN) * BK, STAGE_BYTES = STAGE * 2, HALF_B = BN / CLUSTER, BOX = 64;
constexpr int HALF_C = BN / 2;  // the columns of C a consumer stages at once

// The pair-th pair of tiles of C (CLUSTER tiles one above the other) in the grouped order: (its first row, its
// first column).
__device__ __forceinline__ int2 pair_origin(int pair, int pairs_m, int tiles_n) {
  const int group = pair / (GROUP_M * tiles_n), first = group * GROUP_M;
  const int rows = min(pairs_m - first, GROUP_M), in_group = pair % (GROUP_M * tiles_n);
  return make_int2((first + in_group % rows) * BM * CLUSTER, in_group / rows * BN);
}

// HALF_C columns of the consumer's 64 rows of sums (d, from the half's first) plus their bias, rounded once,
// into its staging tile: HALF_C / BOX boxes of 64 rows of 128 bytes in the 128-byte swizzle, as a TMA store of
// map_c reads them. Thread t of warp w holds rows 16 w + t / 4 and + 8, columns 2 (t % 4) and + 1 of every 8
// (wgmma's layout); each pair is one 4-byte store, and a warp's stores fall in 32 different banks (eight rows,
// each its chunk at a different place).
template <typename T>
__device__ __forceinline__ void stage_half(T* tile, const float* d, const T* bias) {
  const int lane = threadIdx.x % 32, r = threadIdx.x % 128 / 32 * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < HALF_C / 8; ++j) {
    const int c = j * 8 + 2 * (lane % 4);
    T* box = tile + c / BOX * BOX * 64;
    for (int row = 0; row < 2; ++row) {
      const int at = swizzled(r + 8 * row, c % BOX / 8) * 8 + c % 8;
      store_two(box + at, d[4 * j + 2 * row] + to_float(bias[c]), d[4 * j + 2 * row + 1] + to_float(bias[c + 1]));
    }
  }
}

template <typename T>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
matmul_nt_tma_store(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const __grid_constant__ CUtensorMap map_c, bool staged, const T* __restrict__ bias,
                    T* __restrict__ C, int64_t ldc, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem[];
  T* stages = tiles_start<T>(smem);  // 1,024-byte aligned, at the same place in both blocks
  T* staging = stages + STAGES * STAGE;  // then each consumer's 64 x HALF_C piece of C
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
        mbarrier_arrive_expect(&full[s], STAGE_BYTES);
        T* stage = stages + s * STAGE;
        tma_load(stage, &map_a, step * BK, at.x + rank * BM, &full[s]);
        tma_load_multicast(stage + (BM + rank * HALF_B) * BK, &map_b, step * BK, at.y + rank * HALF_B, &full[s],
                           (1 << CLUSTER) - 1);
      }
    }
    // The neighbour's consumers arrive on this block's empty barriers up to its last stage: wait for them all.
    for (int u = use < STAGES ? 0 : use - STAGES; u < use; ++u) mbarrier_wait(&empty[u % STAGES], u / STAGES % 2);
    return;
  }
  setmaxnreg_inc<232>();
  const int group = role - 1, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  const bool leader = threadIdx.x % 128 == 0;  // the thread that hands the consumer's tile to TMA
  T* mine = staging + group * 64 * HALF_C;
  __shared__ T tile_bias[CONSUMERS][BN];  // each consumer's copy of its tile's bias
  int use = 0;
  for (int pair = blockIdx.x / CLUSTER; pair < pairs; pair += gridDim.x / CLUSTER) {
    const int2 at = pair_origin(pair, pairs_m, tiles_n);
    // Two of the tile's bias values a thread, asked for now, needed only at the end: the load's time is hidden.
    const int n = at.y + 2 * (threadIdx.x % 128);
    const T b0 = staged && bias != nullptr && n < N ? bias[n] : rounded<T>(0.0f);
    const T b1 = staged && bias != nullptr && n + 1 < N ? bias[n + 1] : rounded<T>(0.0f);
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
    const int row = at.x + rank * BM + group * 64;
    if (!staged) {
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) store_fragment(C, ldc, bias, row + warp * 16, at.y + j * 8, M, N, d + 4 * j);
      continue;
    }
    tile_bias[group][2 * (threadIdx.x % 128)] = b0;  // the last tile's were read before its last sync
    tile_bias[group][2 * (threadIdx.x % 128) + 1] = b1;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // kplay:todo Once TMA has read the staging tile, stage this half, fence, sync, and store it (leader).
      // kplay:why The fence makes the warpgroup's ordinary stores visible to the copy engine (the async proxy);
      // kplay:why the sync makes sure every thread's are in before the leader starts the copies.
      if (leader) bulk_wait_read<0>();
      warpgroup_sync(group);
      stage_half(mine, d + half * HALF_C / 2, tile_bias[group] + half * HALF_C);
      fence_proxy_async();
      warpgroup_sync(group);
      if (leader) {
        for (int box = 0; box < HALF_C / BOX; ++box) {
          tma_store(&map_c, at.y + half * HALF_C + box * BOX, row, mine + box * BOX * 64);
        }
        bulk_commit();
      }
      // kplay:end
    }
  }
  if (leader) bulk_wait_read<0>();  // every store has read its tile before the block's shared memory is gone
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
  if (compute_capability() != 90) return "linear: cuda-tma-store needs clusters, TMA and wgmma, compute capability 9.0";
  const int64_t pairs = ((M + 2 * BM - 1) / (2 * BM)) * ((N + BN - 1) / BN);
  if (pairs > INT32_MAX / CLUSTER) return "linear: too many tiles of C for one grid";
  CUtensorMap map_a{}, map_b{};  // K == 0: no step reads them, and C is the bias
  if (K > 0) {
    if (const char* err = tensor_map(&map_a, A, M, K, lda, BM)) return err;
    if (const char* err = tensor_map(&map_b, B, N, K, ldb, HALF_B)) return err;  // a block copies half of B's tile
  }
  // C through TMA where its rows are whole 16-byte pieces (boxes of 64 rows); else straight from the registers.
  CUtensorMap map_c{};
  const bool staged = ldc % 8 == 0 && reinterpret_cast<uintptr_t>(C) % 16 == 0 && !tensor_map(&map_c, C, M, N, ldc, 64);
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return launch_error();
  }
  constexpr int bytes = STAGES * STAGE_BYTES + CONSUMERS * 64 * HALF_C * 2 + 1024;  // 224 KB, and room to align
  auto* kernel = matmul_nt_tma_store<T>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    return launch_error();
  }
  // Persistent: as many clusters as fit at once (a cluster's two SMs come from one GPC), a pair of tiles each.
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(sms / CLUSTER * CLUSTER), config.blockDim = dim3(THREADS), config.dynamicSmemBytes = bytes;
  // Asked once a GPU (the first 16 remembered): the answer is the same every call. Atomic: the forward and the
  // backward may launch from different threads.
  static std::atomic<int> known[16];
  int clusters = device < 16 ? known[device].load(std::memory_order_relaxed) : 0;
  if (clusters < 1) {
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess || clusters < 1) {
      (void)cudaGetLastError();  // no answer: a cluster per two SMs
      clusters = sms / CLUSTER;
    }
    if (device < 16) known[device].store(clusters, std::memory_order_relaxed);
  }
  const unsigned blocks = CLUSTER * unsigned(pairs < clusters ? pairs : clusters);
  kernel<<<blocks, THREADS, bytes, stream>>>(map_a, map_b, map_c, staged, bias, C, ldc, int(M), int(N), int(K));
  return launch_error();
}

}  // namespace KPLAY_NS
