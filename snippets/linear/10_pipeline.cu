// Step 10 of the matmul ladder (cuda-pipeline): cp.async in a three-stage pipeline, and swizzled tiles.
// From step 9: copies that skip the registers and run while the warps multiply; a swizzle in place of padding.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. Step 9 waits for each
// tile: load, sync, multiply, sync. Here cp.async copies global -> shared on its own (no register holds the
// values on the way) and a thread may have several groups of copies in flight: while the warps multiply the
// tiles of step k, those of k + 1 and k + 2 are arriving in two more copies of shared memory (STAGES = 3).
// A tile row is 128 bytes with no padding: chunk c of row r is stored at chunk c ^ (r % 8) (tensor.cuh's
// `swizzled`), so the 8 rows an ldmatrix phase reads still hit all 32 banks. It is the layout wgmma and TMA
// read (steps 11-13), and padding would not fit it.
//
// float32 runs here too, as TF32 (other arithmetic: task.toml's math = "tf32"): mma.sync m16n8k8, its
// fragments loaded by the same ldmatrix and rounded in registers, one instruction a value on Hopper, three
// before it (tensor.cuh's tf32; rounding in shared memory held every warp at the sync). A row then holds 32
// values, not 64, and every address below counts 16-byte chunks, the same for both. A thread's copies start
// where it worked out once (tensor.cuh's TileCopy): each step adds k. Each k-step loads the next one's
// fragments before it multiplies its own (two sets in registers), across the end of a stage too: ldmatrix's
// latency hides behind the mma, and the sync with it. By default a block's 128 x 128 of C is 4 warps of
// 64 x 64, not step 9's 8 of 64 x 32: a wider warp tile reads less shared memory per mma. The tiles, warps
// and stages are parameters (kplay run linear --variant cuda-pipeline --param ...).
#define TENSOR_STEP_TAKES_FLOAT  // tensor.cuh: the float32 entry point calls launch<float>
#include "tensor.cuh"  // launch_matmul_nt, ldmatrix_x4, mma_16816, mma_1688_tf32, TileCopy, store_fragment

namespace KPLAY_NS {

constexpr int BM = {{block_m}}, BN = {{block_n}};  // rows and columns of C per block
constexpr int STAGES = {{stages}}, CHUNKS = 8;  // CHUNKS: 16-byte chunks of a tile row, 128 bytes
constexpr int WARPS_M = {{warps_m}}, WARPS_N = {{warps_n}}, THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MI = WM / 16, NI = WN / 8;
constexpr int STAGE = (BM + BN) * CHUNKS;  // chunks in one stage: A's tile, then B's (32 KB at 128 x 128)
static_assert(CHUNKS / 2 % 2 == 0, "an even number of k-steps a stage: every step's first fragments go to f[0]");

// This thread's share of the copies of A's tiles and of B's, each stage's tile of A before its tile of B.
template <typename T>
struct StageCopy {
  TileCopy<BM, THREADS, T> a;
  TileCopy<BN, THREADS, T> b;
  __device__ void operator()(uint4* s, int k0, int K, bool vec) const {
    a(s, k0, K, vec), b(s + BM * CHUNKS, k0, K, vec);
  }
};

// The warp's fragments for one k-step: chunks kc and kc + 1 of each row, k16 of 16-bit values, k8 of TF32.
// pa, pb: the chunks this lane gives ldmatrix at k-step 0 (its rows of A and B, swizzled). At an even kc the
// chunk is pa ^ kc: c + kc = c ^ kc for c < 2, and XORs commute, so a k-step costs one XOR, not the swizzle.
template <typename T>
struct Fragments {
  uint32_t a[MI][4], b[NI][2];

  __device__ __forceinline__ void load(const uint4* As, const uint4* Bs, int kc, int pa, int pb) {
#pragma unroll
    for (int i = 0; i < MI; ++i) ldmatrix_x4(a[i], As + (pa ^ kc) + i * 16 * CHUNKS);
#pragma unroll
    for (int j = 0; j < NI; j += 2) {
      uint32_t r[4];
      ldmatrix_x4(r, Bs + (pb ^ kc) + j * 8 * CHUNKS);
      b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
    }
  }

  // TF32's values rounded here, as they are used, not as they are loaded: rounded on load, they ran slower
  // on an H100 (and the three-instruction form took 254 registers and spilled).
  __device__ __forceinline__ void multiply(float (&acc)[MI][NI][4]) const {
    constexpr bool TF32 = std::is_same_v<T, float>;  // to the nearest TF32: the tensor cores would truncate
    uint32_t ra[MI][4], rb[NI][2];
#pragma unroll
    for (int i = 0; i < MI; ++i) for (int r = 0; r < 4; ++r) ra[i][r] = TF32 ? tf32(a[i][r]) : a[i][r];
#pragma unroll
    for (int j = 0; j < NI; ++j) for (int r = 0; r < 2; ++r) rb[j][r] = TF32 ? tf32(b[j][r]) : b[j][r];
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        if constexpr (TF32) {
          mma_1688_tf32(acc[i][j], ra[i], rb[j]);
        } else {
          mma_16816<T>(acc[i][j], ra[i], rb[j]);
        }
      }
    }
  }
};

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_pipeline(const T* __restrict__ A, int64_t lda, const T* __restrict__ B, int64_t ldb,
                   const T* __restrict__ bias, T* __restrict__ C, int64_t ldc, int M, int N, int K, bool vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(1024) uint4 stages[];
  constexpr int BK = CHUNKS * 16 / sizeof(T);  // k per stage: 64 16-bit values, 32 floats
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, steps = (K + BK - 1) / BK;
  float acc[MI][NI][4] = {};
  const StageCopy<T> copy{{A, lda, m0, M, int(threadIdx.x)}, {B, ldb, n0, N, int(threadIdx.x)}};
  const int pa = swizzled(wm + lane % 16, lane / 16), pb = swizzled(wn + lane % 8 + lane / 16 * 8, lane / 8 % 2);

  // The pipeline fills: steps 0 .. STAGES - 2 in flight, one commit group each (empty past the last step,
  // so that "all but STAGES - 2 groups done" always means "the next step's tiles are here").
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) copy(stages + s * STAGE, s * BK, K, vec);
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  Fragments<T> f[2];  // one k-step's fragments multiplied while the next one's arrive from shared memory
  if (steps > 0) f[0].load(stages, stages + BM * CHUNKS, 0, pa, pb);
  for (int step = 0, read = 0; step < steps; ++step) {
    const int write = read == 0 ? STAGES - 1 : read - 1;  // the stage the last step read: step + STAGES - 1's
    const int next = read == STAGES - 1 ? 0 : read + 1;
    // kplay:todo Copy step + STAGES - 1 into `write`, and commit the group.
    // kplay:why The sync before this step's first fragments said every warp is done with `write`. Commit a
    // kplay:why group even when there is no step left to copy, so the count of groups stays true.
    if (step + STAGES - 1 < steps) copy(stages + write * STAGE, (step + STAGES - 1) * BK, K, vec);
    cp_async_commit();
    // kplay:end
#pragma unroll
    for (int ks = 0; ks < CHUNKS / 2; ++ks) {  // each k-step loads the next one's fragments, then multiplies
      if (ks < CHUNKS / 2 - 1) {  // the next k-step is in this stage
        const uint4* As = stages + read * STAGE;
        f[(ks + 1) % 2].load(As, As + BM * CHUNKS, 2 * (ks + 1), pa, pb);
      } else {  // it is the next step's first
        // kplay:todo Wait until the next step's tiles are here (all but STAGES - 2 groups), and sync.
        // kplay:why A thread's wait covers its own copies; the sync shows everyone's to every warp, and says
        // kplay:why every warp is done with this stage (its last fragments are in registers).
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        // kplay:end
        const uint4* As = stages + next * STAGE;
        if (step + 1 < steps) f[(ks + 1) % 2].load(As, As + BM * CHUNKS, 0, pa, pb);
      }
      f[ks % 2].multiply(acc);
    }
    read = next;
  }
  cp_async_wait<0>();  // no copy outlives the block (the last groups are empty, but say so)
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int j = 0; j < NI; ++j) store_fragment(C, ldc, bias, m0 + wm + i * 16, n0 + wn + j * 8, M, N, acc[i][j]);
  }
#else
  __trap();  // launch() refuses a GPU before compute capability 8.0
#endif
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write; an empty grid is a launch error
  if (M > INT32_MAX - BM || N > INT32_MAX - BN || K > INT32_MAX - 64) return "linear: a dimension exceeds 2^31 - 129";
  if (compute_capability() < 80) return "linear: cuda-pipeline needs cp.async and mma.sync, compute capability 8.0+";
  if ((M + BM - 1) / BM > 65535) return "linear: batch too large for one grid (gridDim.y <= 65535)";
  // 16-bit operands come padded to 16-byte rows (linear_cuda.cpp); float32 ones may not: then value by value
  constexpr int64_t values = 16 / sizeof(T);
  const bool vec = K % values == 0 && lda % values == 0 && ldb % values == 0 &&
                   reinterpret_cast<uintptr_t>(A) % 16 == 0 && reinterpret_cast<uintptr_t>(B) % 16 == 0;
  constexpr int bytes = STAGES * STAGE * 16;  // 96 KB by default: over the 48 KB a block gets unless it asks
  if (cudaFuncSetAttribute(matmul_nt_pipeline<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    return launch_error();
  }
  const dim3 blocks(unsigned((N + BN - 1) / BN), unsigned((M + BM - 1) / BM));
  matmul_nt_pipeline<T><<<blocks, THREADS, bytes, stream>>>(A, lda, B, ldb, bias, C, ldc, int(M), int(N), int(K), vec);
  return launch_error();
}

}  // namespace KPLAY_NS
