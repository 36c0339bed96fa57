// What every step of the matmul ladder shares, in the order the steps meet it: the entry points
// linear_cuda.cpp calls and the grid of tiles over C (every step); the scalar tile copy (steps 3-4); the
// 16-byte loads and stores and their launcher (steps 5-7); the warp tiles' shape and store (steps 6-7).
// Each step's .cu holds its kernel and what it changes; it defines
//   template <typename T> const char* launch(A, lda, B, ldb, bias, C, ldc, M, N, K, stream);
// for C[m][n] = bias[n] + sum_k A[m][k] B[n][k]. Only cuda_runtime.h: nvcc never parses torch's headers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace KPLAY_NS {

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream);  // the step's

// nullptr on success, else the CUDA error. `stream` is the caller's current cudaStream_t.
const char* launch_matmul_nt(const float* A, int64_t lda, const float* B, int64_t ldb, const float* bias, float* C,
                             int64_t ldc, int64_t M, int64_t N, int64_t K, void* stream) {
  return launch(A, lda, B, ldb, bias, C, ldc, M, N, K, static_cast<cudaStream_t>(stream));
}
const char* launch_matmul_nt(const double* A, int64_t lda, const double* B, int64_t ldb, const double* bias,
                             double* C, int64_t ldc, int64_t M, int64_t N, int64_t K, void* stream) {
  return launch(A, lda, B, ldb, bias, C, ldc, M, N, K, static_cast<cudaStream_t>(stream));
}
// The tensor-core steps' entry point (tensor.cuh), refused: these steps multiply float32 and float64.
const char* launch_matmul_nt(const uint16_t*, int64_t, const uint16_t*, int64_t, const uint16_t*, uint16_t*, int64_t,
                             int64_t, int64_t, int64_t, bool, void*) {
  return "linear: this step takes float32 and float64";
}

// The grid that covers C (M x N) with tiles of BM rows and BN columns, or an error for a batch too tall.
inline const char* tile_grid(int64_t M, int64_t N, int64_t BM, int64_t BN, dim3& blocks) {
  if ((M + BM - 1) / BM > 65535) return "linear: batch too large for one grid (gridDim.y <= 65535)";
  blocks = dim3(unsigned((N + BN - 1) / BN), unsigned((M + BM - 1) / BM));
  return nullptr;
}

// nullptr when the launch went through, else CUDA's words for what went wrong.
inline const char* launch_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// ---- steps 3-4: the block's tile, one value per thread per turn --------------------------------------

// Rows row0 .. row0 + ROWS - 1 of P (R x K, row stride ld), the BK columns from k0, into tile[k][row]
// (k-major: for one k a thread's rows are neighbours). Neighbouring threads read neighbouring k of one row,
// then the next row: whole 32-byte sectors. Zeros outside the matrix make a ragged last tile add nothing.
template <int ROWS, int BK, int THREADS, typename T>
__device__ __forceinline__ void copy_tile(const T* __restrict__ P, int64_t ld, int64_t row0, int64_t k0, int64_t R,
                                          int64_t K, T (*tile)[ROWS]) {
  for (int i = threadIdx.x; i < ROWS * BK; i += THREADS) {
    const int r = i / BK, c = i % BK;
    tile[c][r] = (row0 + r < R && k0 + c < K) ? P[(row0 + r) * ld + k0 + c] : T(0);
  }
}

// ---- steps 5-7: 16 bytes per instruction -------------------------------------------------------------

// Four consecutive k of row r of P (R x K, row stride ld), zero outside the matrix so that a ragged
// last tile adds nothing. One 16-byte load when T is float, the four are in bounds and aligned.
template <typename T>
__device__ __forceinline__ void load4(const T* __restrict__ P, int64_t ld, int r, int k, int R, int K,
                                      bool vec, T (&v)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    if (vec && r < R && k + 4 <= K) {
      const float4 q = *reinterpret_cast<const float4*>(P + r * ld + k);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      return;
    }
  }
  for (int j = 0; j < 4; ++j) v[j] = (r < R && k + j < K) ? P[r * ld + k + j] : T(0);
}

// Four consecutive values, from shared memory or from a tile inside the matrix: one 16-byte load for float
// (src aligned to 16 bytes).
template <typename T>
__device__ __forceinline__ void copy4(T* dst, const T* src) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 q = *reinterpret_cast<const float4*>(src);
    dst[0] = q.x, dst[1] = q.y, dst[2] = q.z, dst[3] = q.w;
  } else {
    for (int j = 0; j < 4; ++j) dst[j] = src[j];
  }
}

// This thread's share of a step's tile, global -> registers: the BK columns from k0 of rows row0 .. row0 +
// ROWS - 1 of P, as 4-vectors i = threadIdx.x, + THREADS, ... (row i / (BK / 4), column 4 (i % (BK / 4))).
// Every load starts before anything waits for one; where the vectors do not divide evenly among the
// threads, the last ones skip. A tile wholly inside the matrix (the same answer for the whole block) skips
// the tests for its edges, and each load is a fixed number of rows below the one before: an add, not an
// address worked out afresh.
template <int ROWS, int BK, int THREADS, typename T, int LOADS>
__device__ __forceinline__ void fetch_tile(const T* __restrict__ P, int64_t ld, int row0, int k0, int R, int K,
                                           bool vec, T (&regs)[LOADS][4]) {
  constexpr int VECS = ROWS * BK / 4, ROWS_APART = THREADS / (BK / 4);
  constexpr bool SAME_K = THREADS % (BK / 4) == 0;  // every load at the same k, ROWS_APART rows apart
  const bool inside = SAME_K && row0 + ROWS <= R && k0 + BK <= K && (vec || !std::is_same_v<T, float>);
  const T* first = P + int64_t(row0 + threadIdx.x / (BK / 4)) * ld + k0 + (threadIdx.x % (BK / 4)) * 4;
#pragma unroll
  for (int l = 0; l < LOADS; ++l) {
    const int i = threadIdx.x + l * THREADS, r = i / (BK / 4), k = (i % (BK / 4)) * 4;
    if (VECS % THREADS != 0 && i >= VECS) continue;
    if (inside) {
      copy4(regs[l], first + int64_t(l) * ROWS_APART * ld);  // no tests: 16-byte aligned for float
    } else {
      load4(P, ld, row0 + r, k0 + k, R, K, vec, regs[l]);
    }
  }
}

// fetch_tile's registers -> the tile in shared memory, k-major: tile[k][row].
template <int ROWS, int BK, int THREADS, typename T, int LOADS, int WIDTH>
__device__ __forceinline__ void stash_tile(const T (&regs)[LOADS][4], T (*tile)[WIDTH]) {
  constexpr int VECS = ROWS * BK / 4;
#pragma unroll
  for (int l = 0; l < LOADS; ++l) {
    const int i = threadIdx.x + l * THREADS, r = i / (BK / 4), k = (i % (BK / 4)) * 4;
    if (VECS % THREADS == 0 || i < VECS)
      for (int j = 0; j < 4; ++j) tile[k + j][r] = regs[l][j];
  }
}

// Stores v to C[m][n..n+3], skipping columns past N. One 16-byte store when it can.
template <typename T>
__device__ __forceinline__ void store4(T* __restrict__ C, int64_t ldc, int m, int n, int N, bool vec,
                                       const T (&v)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    if (vec && n + 4 <= N) {
      *reinterpret_cast<float4*>(C + m * ldc + n) = make_float4(v[0], v[1], v[2], v[3]);
      return;
    }
  }
  for (int j = 0; j < 4; ++j)
    if (n + j < N) C[m * ldc + n + j] = v[j];
}

// float4 needs the row stride to be a multiple of 4 elements and the base 16-byte aligned.
template <typename T>
bool rows_aligned(const T* p, int64_t ld) {
  return ld % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// A kernel of steps 5-7: int sizes, and whether A, B and C may be read and written as float4.
template <typename T>
using VecKernel = void (*)(const T*, int64_t, const T*, int64_t, const T*, T*, int64_t, int, int, int, bool, bool,
                           bool);

// Steps 5-7's launch: a BM x BN tile of C per block, `threads` threads and `smem` bytes of dynamic shared
// memory each, every operand's alignment checked once here rather than per load.
template <int BM, int BN, typename T>
const char* launch_tiles(VecKernel<T> kernel, int threads, int smem, const T* A, int64_t lda, const T* B, int64_t ldb,
                         const T* bias, T* C, int64_t ldc, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write; an empty grid is a launch error
  // int indices, and k0 + BK, n + 3 past the last tile: a margin below 2^31 keeps them from overflowing
  constexpr int64_t kMax = INT32_MAX - 1024;
  if (M > kMax || N > kMax || K > kMax) return "linear: a dimension exceeds 2^31 - 1025";
  dim3 blocks;
  if (const char* err = tile_grid(M, N, BM, BN, blocks)) return err;
  kernel<<<blocks, threads, smem, stream>>>(A, lda, B, ldb, bias, C, ldc, int(M), int(N), int(K), rows_aligned(A, lda),
                                            rows_aligned(B, ldb), rows_aligned(C, ldc));
  return launch_error();
}

// ---- steps 6-7: a tile per warp ----------------------------------------------------------------------

// What the warp-tiled steps' seven tiles make: a block of BM x BN outputs split into WM x WN tiles, one per
// warp, each walked in sub-tiles of 8 x 4 lanes with TM x TN outputs per lane. task.toml's constraints say
// the same rules before any build; these asserts catch a folder whose numbers were edited by hand.
template <int BM, int BN, int BK, int WM, int WN, int TM, int TN>
struct WarpTiles {
  static constexpr int WARPS_N = BN / WN;                          // warps across the block's tile
  static constexpr int THREADS = (BM / WM) * WARPS_N * 32;
  static constexpr int SUB_M = 8 * TM, SUB_N = 4 * TN;             // a sub-tile: 32 lanes as 8 rows x 4 columns
  static constexpr int ITER_M = WM / SUB_M, ITER_N = WN / SUB_N;   // sub-tiles per warp tile
  static constexpr int PAD = 4;  // shifts each k-row of a tile by 4 banks, as in step 5
  static constexpr int LOADS_A = (BM * BK / 4 + THREADS - 1) / THREADS;  // 4-vectors of a step's A tile per thread
  static constexpr int LOADS_B = (BN * BK / 4 + THREADS - 1) / THREADS;  // and of B
  static_assert(BM % WM == 0 && BN % WN == 0, "a block tile is a whole number of warp tiles");
  static_assert(WM % SUB_M == 0 && WN % SUB_N == 0,
                "a warp tile is a whole number of sub-tiles (8 thread_m x 4 thread_n)");
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "threads move 4-vectors");
  static_assert(THREADS <= 1024, "at most 32 warps per block");
};

// A warp-tiled thread's outputs, plus the bias, to C: acc[si * TM + i][sj * TN + j] is C's row
// m_first + si * SUB_M + i, column n_first + sj * SUB_N + j (its sub-tiles are SUB_M rows and SUB_N columns
// apart); rows past M are skipped, columns past N cut by store4.
template <int TM, int TN, int SUB_M, int SUB_N, typename T, int ROWS, int COLS>
__device__ __forceinline__ void store_warp_tiles(const T (&acc)[ROWS][COLS], const T* __restrict__ bias, T* C,
                                                 int64_t ldc, int M, int N, int m_first, int n_first, bool vec_c) {
#pragma unroll
  for (int si = 0; si < ROWS / TM; ++si)
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int m = m_first + si * SUB_M + i;
      if (m >= M) continue;  // the last block row overhangs the matrix
#pragma unroll
      for (int sj = 0; sj < COLS / TN; ++sj)
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
          const int n = n_first + sj * SUB_N + j;
          T v[4];
          for (int q = 0; q < 4; ++q)
            v[q] = acc[si * TM + i][sj * TN + j + q] + ((bias != nullptr && n + q < N) ? bias[n + q] : T(0));
          store4(C, ldc, m, n, N, vec_c, v);
        }
    }
}

}  // namespace KPLAY_NS
