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
//
// float32 runs here too, as TF32 (task.toml's math = "tf32"): wgmma m64n256k8, a stage's rows still 128 bytes
// (32 floats). The tensor cores would drop each float's low 13 bits, where cuBLAS rounds to nearest; the
// producer's three idle warps round each stage in place once it lands, and only then pass it on (`ready`):
// the consumers spend no instruction on it. TMA wants rows of whole 16-byte pieces: linear_cuda.cpp pads a
// copy where K or a base is not, for float32 here as for 16-bit values (-DWHOLE_FLOAT_ROWS, task.toml).
#define TENSOR_STEP_TAKES_FLOAT  // tensor.cuh: the float32 entry point calls launch<float>
#include "hopper.cuh"  // tma_load, tensor_map, mbarrier_*, wgmma_step, smem_descriptor, setmaxnreg_*

namespace KPLAY_NS {

constexpr int BM = 128, BN = 256, STAGES = 4, GROUP_M = 8;
constexpr int CONSUMERS = BM / 64, THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies, the others multiply
constexpr int STAGE_BYTES = (BM + BN) * 128;  // A's tile, then B's: rows of 128 bytes
template <typename T>
constexpr int BK = 128 / sizeof(T);  // k per stage: 64 16-bit values, 32 floats
template <typename T>
constexpr int STAGE = (BM + BN) * BK<T>;  // values in a stage

// The tile-th tile of C in the grouped order: (its first row, its first column).
__device__ __forceinline__ int2 tile_origin(int tile, int tiles_m, int tiles_n) {
  const int group = tile / (GROUP_M * tiles_n), first = group * GROUP_M;
  const int rows = min(tiles_m - first, GROUP_M), in_group = tile % (GROUP_M * tiles_n);
  return make_int2((first + in_group % rows) * BM, in_group / rows * BN);
}

// Warps 1-3 of the producer, for float32: stage after stage, once its copies land (`full`), every value
// rounded to the nearest TF32 in place (tensor.cuh's tf32), made visible to wgmma, and passed on (`ready`).
__device__ __forceinline__ void round_stages(uint4* stages, uint64_t* full, uint64_t* ready, int uses) {
  constexpr int CHUNKS = STAGE_BYTES / 16, ROUNDERS = 96;  // 3,072 chunks of 16 bytes: 32 a rounder
  static_assert(CHUNKS % (4 * ROUNDERS) == 0, "every rounder takes as many chunks, four at a time");
  for (int use = 0; use < uses; ++use) {
    const int s = use % STAGES;
    mbarrier_wait(&full[s], use / STAGES % 2);
    uint4* chunk = stages + s * CHUNKS + threadIdx.x - 32;
#pragma unroll 1
    for (int i = 0; i < CHUNKS; i += 4 * ROUNDERS) {  // four loads in flight, then their four stores
      uint4 q[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) q[j] = chunk[i + j * ROUNDERS];
#pragma unroll
      for (int j = 0; j < 4; ++j) chunk[i + j * ROUNDERS] = make_uint4(tf32(q[j].x), tf32(q[j].y), tf32(q[j].z),
                                                                    tf32(q[j].w));
    }
    fence_proxy_async();  // this thread's stores, visible to the async proxy (wgmma)
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbarrier_arrive(&ready[s]);
  }
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1)
matmul_nt_warp_specialized(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                           const T* __restrict__ bias, T* __restrict__ C, int64_t ldc, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem[];
  T* stages = tiles_start<T>(smem);  // 1,024-byte aligned: the swizzle's period
  __shared__ alignas(8) uint64_t full[STAGES], empty[STAGES], ready[STAGES];  // ready: float32's, rounded
  constexpr bool TF32 = std::is_same_v<T, float>;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, steps = (K + BK<T> - 1) / BK<T>;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(&full[s], 1), mbarrier_init(&empty[s], CONSUMERS * 4), mbarrier_init(&ready[s], 3);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  const int role = threadIdx.x / 128;
  if (role == 0) {
    setmaxnreg_dec<40>();
    if (TF32 && threadIdx.x >= 32) {
      const int mine = (tiles_m * tiles_n - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);  // its tiles
      round_stages(reinterpret_cast<uint4*>(stages), full, ready, mine * steps);
    }
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
        tma_load(stages + s * STAGE<T>, &map_a, step * BK<T>, at.x, &full[s]);
        tma_load(stages + s * STAGE<T> + BM * BK<T>, &map_b, step * BK<T>, at.y, &full[s]);
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
      mbarrier_wait(TF32 ? &ready[s] : &full[s], use / STAGES % 2);
      __syncwarp();  // the lanes leave the wait's loop apart: wgmma's .aligned wants the warp whole
      const T* As = stages + s * STAGE<T> + group * 64 * BK<T>;
      const T* Bs = stages + s * STAGE<T> + BM * BK<T>;
      fence_registers(d);  // the sums' last ordinary writes (the zeros) stay before the fence
    wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK<T>; kk += K_STEP<T>) {
        wgmma_step<BN, T>(d, smem_descriptor(As + kk), smem_descriptor(Bs + kk), 1);
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
  if (M > INT32_MAX - BN || N > INT32_MAX - BN || K > INT32_MAX - 64) return "linear: a dimension exceeds 2^31 - 257";
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
