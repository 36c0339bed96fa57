// Step 8 of the matmul ladder (cuda-tensor-core): the tensor cores, which multiply whole tiles per instruction.
// From step 7: wmma fragments in place of the CUDA cores' FMAs, float32 inputs rounded to TF32 (other arithmetic).
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. Every step before this
// one multiplies on the CUDA cores, one FMA per lane per instruction, and cuBLAS in float32 runs there too,
// below their peak: the ladder stops near it. One warp-wide wmma::mma_sync on a 16 x 16 x 8 fragment does
// 2,048 FMAs. The tensor cores take float32 only as TF32: each input rounded to 10 of float32's 23 mantissa
// bits (wmma::__float_to_tf32, to nearest), the products added in float32. That is other arithmetic, off by
// about 2^-11 of each product: the check's tolerance says so (task.toml's math = "tf32", spec.py), and the
// fair reference is cuBLAS with TF32 allowed (benchmarks/linear_gpu.py times both). float64 takes the tensor
// cores' FP64 path (8 x 8 x 4 fragments): float64 FMAs, the sum in another order. Compute capability 8.0
// (Ampere) or newer.
//
// A block of 8 warps computes a 128 x 128 tile of C, each warp a 64 x 32 piece of it as a grid of
// accumulator fragments in registers. The block walks k through shared memory as step 5 does, but the
// tiles are stored row by row ([row][k]), the layout wmma's fragment loads read.
#include "ladder.cuh"  // launch_matmul_nt, tile_grid, launch_error, load4, rows_aligned

#include <mma.h>

namespace KPLAY_NS {

namespace wmma = nvcuda::wmma;

constexpr int BM = 128, BN = 128, BK = 16;  // the block's tile of C, and k per shared-memory step
constexpr int LD = BK + 4;  // a tile row's length: a multiple of 4 (wmma's rule), 32-byte aligned fragments
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // each warp's piece of C: 64 x 32
constexpr int LOADS = BM * BK / 4 / THREADS;         // 4-vectors of each tile per thread a step
static_assert(BM == BN && BM * BK % (4 * THREADS) == 0, "every thread moves as many 4-vectors of each tile");

// A fragment's shape and what its inputs are: TF32 16 x 16 x 8 for float, FP64 8 x 8 x 4 for double.
template <typename T>
struct Mma;
template <>
struct Mma<float> {
  static constexpr int M = 16, N = 16, K = 8;
  using In = wmma::precision::tf32;
};
template <>
struct Mma<double> {
  static constexpr int M = 8, N = 8, K = 4;
  using In = double;
};

// What the tensor cores take: float rounded to TF32 (to nearest, wmma's conversion), double as it is.
template <typename T>
__device__ __forceinline__ T mma_input(T v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, float>) return wmma::__float_to_tf32(v);
#endif
  return v;
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_tensor_core(const T* __restrict__ A, int64_t lda, const T* __restrict__ B, int64_t ldb,
                      const T* __restrict__ bias, T* __restrict__ C, int64_t ldc, int M, int N, int K, bool vec_a,
                      bool vec_b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using F = Mma<T>;
  constexpr int FM = WM / F::M, FN = WN / F::N;  // fragments per warp: 4 x 2 (float), 8 x 4 (double)
  __shared__ alignas(32) T As[BM][LD];
  __shared__ alignas(32) T Bs[BN][LD];
  const int warp = threadIdx.x / 32, wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

  wmma::fragment<wmma::accumulator, F::M, F::N, F::K, T> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], T(0));
  }
  for (int k0 = 0; k0 < K; k0 += BK) {
    // The step's tiles, global -> shared, row by row: zeros outside the matrices add nothing. float is
    // rounded to TF32 once, here, so every warp's fragments load it ready.
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      const int i = threadIdx.x + l * THREADS, r = i / (BK / 4), k = i % (BK / 4) * 4;
      T a[4], b[4];
      load4(A, lda, m0 + r, k0 + k, M, K, vec_a, a);
      load4(B, ldb, n0 + r, k0 + k, N, K, vec_b, b);
#pragma unroll
      for (int j = 0; j < 4; ++j) As[r][k + j] = mma_input(a[j]), Bs[r][k + j] = mma_input(b[j]);
    }
    __syncthreads();
    for (int kk = 0; kk < BK; kk += F::K) {
      // kplay:todo Load the warp's FM fragments of A and FN of B at kk, then mma_sync each pair.
      // kplay:why A fragment of B read column-major from Bs[n][k] is B^T's tile: C = A B^T needs no copy.
      wmma::fragment<wmma::matrix_a, F::M, F::N, F::K, typename F::In, wmma::row_major> a[FM];
      wmma::fragment<wmma::matrix_b, F::M, F::N, F::K, typename F::In, wmma::col_major> b[FN];
#pragma unroll
      for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a[i], &As[wm + i * F::M][kk], LD);
#pragma unroll
      for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(b[j], &Bs[wn + j * F::N][kk], LD);
#pragma unroll
      for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
      // kplay:end
    }
    __syncthreads();  // everyone is done with the tiles before the next step overwrites them
  }
  // Each fragment through the warp's own corner of As (free now), then to C with the bias: a fragment's
  // layout in registers is not specified, and C's edge may cut it.
  T* stage = reinterpret_cast<T*>(As) + warp * F::M * F::N;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], F::N, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < F::M * F::N; e += 32) {
        const int r = m0 + wm + i * F::M + e / F::N, c = n0 + wn + j * F::N + e % F::N;
        if (r < M && c < N) C[int64_t(r) * ldc + c] = stage[e] + (bias ? bias[c] : T(0));
      }
      __syncwarp();  // the stage is read before the next fragment overwrites it
    }
  }
#else
  __trap();  // launch() refuses a GPU before compute capability 8.0
#endif
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write; an empty grid is a launch error
  constexpr int64_t kMax = INT32_MAX - 1024;  // int indices, with k0 + BK and a 4-vector's margin
  if (M > kMax || N > kMax || K > kMax) return "linear: a dimension exceeds 2^31 - 1025";
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return launch_error();
  }
  if (major < 8) return "linear: cuda-tensor-core needs tensor cores with TF32, compute capability 8.0 or newer";
  static_assert(sizeof(T[BM][LD]) * 2 <= 48 * 1024, "static shared memory");
  dim3 blocks;
  if (const char* err = tile_grid(M, N, BM, BN, blocks)) return err;
  matmul_nt_tensor_core<T><<<blocks, THREADS, 0, stream>>>(A, lda, B, ldb, bias, C, ldc, int(M), int(N), int(K),
                                                           rows_aligned(A, lda), rows_aligned(B, ldb));
  return launch_error();
}

}  // namespace KPLAY_NS
