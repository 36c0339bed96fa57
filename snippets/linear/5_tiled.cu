// Step 5 of the matmul ladder (cuda-tiled): 16 bytes per instruction, without bank conflicts ("vectorize").
// From step 4: float4 global loads and stores, and a padded tile layout whose reads take no turns.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. A block computes a
// BM x BN tile of C. It walks k in steps of BK: the block copies a BM x BK slice of A and a BN x BK slice of
// B into shared memory (coalesced, 16-byte loads), then each thread multiplies them into its own TM x TN
// block of C, kept in registers. Per step of k a thread reads TM + TN values from shared memory and does
// TM * TN multiply-adds, as in step 4.
//
// Global loads and stores are float4 (where a row is aligned): a quarter of step 4's global memory
// instructions. The tiles are k-major and padded, and a thread owns groups of 4 rows and columns spaced
// apart (own_row, own_col), so that the 16 threads of a warp that share a row of the B tile read 16
// consecutive 4-vectors of it, each bank once. (Step 4's shared-memory reads are 16-byte too, made so by
// the compiler; its layout is what makes them collide.)
#include "ladder.cuh"  // launch_matmul_nt, launch_tiles, load4, copy4, store4

namespace KPLAY_NS {

constexpr int BM = {{block_m}};   // rows of C per block
constexpr int BN = {{block_n}};   // columns of C per block
constexpr int BK = {{block_k}};   // k per shared-memory step
constexpr int TM = {{thread_m}};  // rows of C per thread
constexpr int TN = {{thread_n}};  // columns of C per thread
constexpr int THREADS = (BM / TM) * (BN / TN);
constexpr int PAD = 4;  // shifts each k-row of a tile by 4 banks: at BK = 8 the threads storing one m land apart
static_assert(BM % TM == 0 && BN % TN == 0, "a block tile is a whole number of thread tiles");
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "threads move 4-vectors");
static_assert(THREADS >= 32 && THREADS <= 1024, "(block_m / thread_m) * (block_n / thread_n) threads: 32 to 1024");
static_assert((BM + BN + 2 * PAD) * BK * sizeof(double) <= 48 * 1024,
              "the float64 tiles exceed the 48 KB of static shared memory a block may have");

// Thread (ty, tx) owns rows ty*4 + i%4 + (i/4)*(4*BM/TM) for i < TM, and the same for columns: groups
// of 4 spaced 4*BM/TM apart instead of TM adjacent rows, so that the 16 threads of a warp that share
// ty read 16 consecutive 4-vectors of a B tile row (no shared-memory bank conflicts).
__device__ __forceinline__ int own_row(int ty, int i) { return ty * 4 + i % 4 + (i / 4) * (4 * BM / TM); }
__device__ __forceinline__ int own_col(int tx, int j) { return tx * 4 + j % 4 + (j / 4) * (4 * BN / TN); }

template <typename T>
__global__ void __launch_bounds__(THREADS)
matmul_nt_tiled(const T* __restrict__ A, int64_t lda,  // (M, K), row stride lda
                const T* __restrict__ B, int64_t ldb,  // (N, K), row stride ldb
                const T* __restrict__ bias,            // (N,) or nullptr
                T* __restrict__ C, int64_t ldc,        // (M, N), row stride ldc
                int M, int N, int K,
                bool vec_a, bool vec_b, bool vec_c) {  // rows 16-byte aligned: float4 allowed
  // Both tiles are stored transposed, k-major (As[k][m]), so that the inner loop reads 4 consecutive
  // m (or n) of one k with a single 16-byte load.
  __shared__ __align__(16) T As[BK][BM + PAD];
  __shared__ __align__(16) T Bs[BK][BN + PAD];

  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);

  T acc[TM][TN] = {};  // this thread's block of C

  for (int k0 = 0; k0 < K; k0 += BK) {
    // Copy: each step of a thread moves 4 consecutive k of one row; neighbouring threads take the
    // next 4 k, then the next row, so a warp reads whole 32-byte sectors of global memory.
    // kplay:todo Copy A's BM x BK slice into As[k][m] and B's BN x BK slice into Bs[k][n], 4 k at a time (load4).
    // kplay:why Every value in shared memory is then read by many threads: global memory is read once per
    // kplay:why tile, not once per multiply.
    for (int i = threadIdx.x; i < BM * BK / 4; i += THREADS) {
      const int r = i / (BK / 4), k = (i % (BK / 4)) * 4;
      T v[4];
      load4(A, lda, m0 + r, k0 + k, M, K, vec_a, v);
      for (int j = 0; j < 4; ++j) As[k + j][r] = v[j];
    }
    for (int i = threadIdx.x; i < BN * BK / 4; i += THREADS) {
      const int r = i / (BK / 4), k = (i % (BK / 4)) * 4;
      T v[4];
      load4(B, ldb, n0 + r, k0 + k, N, K, vec_b, v);
      for (int j = 0; j < 4; ++j) Bs[k + j][r] = v[j];
    }
    // kplay:end
    __syncthreads();  // the tiles are complete

    // kplay:todo For each k of the tile: your TM values of As[k], TN of Bs[k] to registers; acc[i][j] += a[i] * b[j].
    // kplay:why TM + TN reads from shared memory feed TM * TN multiply-adds: registers are the fastest memory there is.
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      T a[TM], b[TN];  // one column of the A tile and one row of the B tile, in registers
#pragma unroll
      for (int i = 0; i < TM; i += 4) copy4(a + i, &As[k][own_row(ty, i)]);
#pragma unroll
      for (int j = 0; j < TN; j += 4) copy4(b + j, &Bs[k][own_col(tx, j)]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
    // kplay:end
    __syncthreads();  // everyone is done with the tiles before the next step overwrites them
  }

  T bias_reg[TN];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int n = n0 + own_col(tx, j);
    bias_reg[j] = (bias != nullptr && n < N) ? bias[n] : T(0);
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + own_row(ty, i);
    if (m >= M) continue;  // the last block row overhangs the matrix
#pragma unroll
    for (int j = 0; j < TN; j += 4) {
      const T v[4] = {acc[i][j] + bias_reg[j], acc[i][j + 1] + bias_reg[j + 1],
                      acc[i][j + 2] + bias_reg[j + 2], acc[i][j + 3] + bias_reg[j + 3]};
      store4(C, ldc, m, n0 + own_col(tx, j), N, vec_c, v);
    }
  }
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  return launch_tiles<BM, BN>(matmul_nt_tiled<T>, THREADS, 0, A, lda, B, ldb, bias, C, ldc, M, N, K, stream);
}

}  // namespace KPLAY_NS
