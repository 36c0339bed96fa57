// Step 9 of the matmul ladder (cuda-mma): the tensor cores through mma.sync, fed by ldmatrix.
// From step 8: bfloat16 or float16 inputs (float32 sums), and the instructions under wmma, by hand.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. wmma hides where each
// value of a fragment lives; mma.sync m16n8k16 says it (tensor.cuh): a warp multiplies a 16 x 16 tile of A by
// a 16 x 8 tile of B, 4,096 multiply-adds per instruction, each lane holding 8 values of A, 4 of B and 4 sums.
// ldmatrix loads those fragments from shared memory, four 8 x 8 matrices per warp-wide instruction, each lane
// pointing at one 16-byte row: one instruction where a lane would otherwise make eight 2-byte loads.
//
// A block of 8 warps computes a 128 x 128 tile of C, each warp a 64 x 32 piece: 4 x 4 mma tiles, 64 float32
// sums per lane. The block walks k in steps of 32 through shared memory: global -> registers -> shared, 16
// bytes per load, then the warps' ldmatrix and mma.sync. Tile rows are padded by 16 bytes (BK + 8 values), so
// the 8 rows one ldmatrix phase reads start in 8 different bank groups.
#include "tensor.cuh"  // launch_matmul_nt, ldmatrix_x4, mma_16816, store_fragment, launch_error

namespace KPLAY_NS {

constexpr int BM = 128, BN = 128, BK = 32;  // the block's tile of C, and k per shared-memory step
constexpr int LD = BK + 8;                   // a tile row: 80 bytes, 16 more than its values
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // each warp's piece of C: 64 x 32
constexpr int MI = WM / 16, NI = WN / 8;              // its mma tiles: 4 x 4
constexpr int CHUNKS = BM * BK / 8 / THREADS;         // 16-byte pieces of each tile per thread a step
static_assert(BM == BN && BM * BK % (8 * THREADS) == 0, "every thread moves as many pieces of each tile");

// Row r's 8 values from k of P (R rows, row stride ld), 16 bytes; zeros past the matrix (K is a multiple of 8,
// so a piece is all inside or all outside).
template <typename T>
__device__ __forceinline__ uint4 load16(const T* __restrict__ P, int64_t ld, int r, int k, int R, int K) {
  return (r < R && k < K) ? *reinterpret_cast<const uint4*>(P + r * ld + k) : make_uint4(0, 0, 0, 0);
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_mma(const T* __restrict__ A, int64_t lda, const T* __restrict__ B, int64_t ldb, const T* __restrict__ bias,
              T* __restrict__ C, int64_t ldc, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  __shared__ alignas(16) T As[BM][LD];
  __shared__ alignas(16) T Bs[BN][LD];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[MI][NI][4] = {};

  for (int k0 = 0; k0 < K; k0 += BK) {
    // The step's tiles: piece i is row i / 4, values 8 (i % 4) .. + 7; a warp reads 8 rows' 64 bytes each.
    uint4 a[CHUNKS], b[CHUNKS];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int i = threadIdx.x + c * THREADS, r = i / (BK / 8), k = i % (BK / 8) * 8;
      a[c] = load16(A, lda, m0 + r, k0 + k, M, K);
      b[c] = load16(B, ldb, n0 + r, k0 + k, N, K);
    }
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int i = threadIdx.x + c * THREADS, r = i / (BK / 8), k = i % (BK / 8) * 8;
      *reinterpret_cast<uint4*>(&As[r][k]) = a[c];
      *reinterpret_cast<uint4*>(&Bs[r][k]) = b[c];
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      // kplay:todo ldmatrix the warp's MI tiles of A and NI of B at kk (lane's row and half), then mma each pair.
      // kplay:why A: lanes 0-15 point at rows 0-15, 16-31 at the same rows' k + 8. B: lane l at row l % 8 +
      // kplay:why 8 (l / 16), k + 8 ((l / 8) % 2): one x4 load is two n-tiles' fragments.
      uint32_t af[MI][4], bf[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], &As[wm + i * 16 + lane % 16][kk + lane / 16 * 8]);
#pragma unroll
      for (int j = 0; j < NI; j += 2) {
        uint32_t r[4];
        ldmatrix_x4(r, &Bs[wn + j * 8 + lane % 8 + lane / 16 * 8][kk + lane / 8 % 2 * 8]);
        bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NI; ++j) mma_16816<T>(acc[i][j], af[i], bf[j]);
      }
      // kplay:end
    }
    __syncthreads();  // every warp is done with the tiles before the next step overwrites them
  }
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
  if (M > INT32_MAX - BM || N > INT32_MAX - BN || K > INT32_MAX - BK) return "linear: a dimension exceeds 2^31 - 129";
  if (compute_capability() < 80) return "linear: cuda-mma needs mma.sync with bfloat16, compute capability 8.0+";
  if ((M + BM - 1) / BM > 65535) return "linear: batch too large for one grid (gridDim.y <= 65535)";
  const dim3 blocks(unsigned((N + BN - 1) / BN), unsigned((M + BM - 1) / BM));
  matmul_nt_mma<T><<<blocks, THREADS, 0, stream>>>(A, lda, B, ldb, bias, C, ldc, int(M), int(N), int(K));
  return launch_error();
}

}  // namespace KPLAY_NS
