// What the 16-byte rungs share (cuda-tiled and the two after it): 4-vector loads and stores that fall back to
// scalars at a matrix's edge or on a misaligned row; the warp-tiled rungs' tile copies, through registers;
// and their last step, the store of a thread's outputs. Included inside the rung's namespace.
#pragma once

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

// This thread's share of a step's tile, global -> registers: the BK columns from k0 of rows row0 .. row0 +
// ROWS - 1 of P, as 4-vectors i = threadIdx.x, + THREADS, ... (row i / (BK / 4), column 4 (i % (BK / 4))).
// Every load starts before anything waits for one; where the vectors do not divide evenly among the
// threads, the last ones skip.
template <int ROWS, int BK, int THREADS, typename T, int LOADS>
__device__ __forceinline__ void fetch_tile(const T* __restrict__ P, int64_t ld, int row0, int k0, int R, int K,
                                           bool vec, T (&regs)[LOADS][4]) {
  constexpr int VECS = ROWS * BK / 4;
#pragma unroll
  for (int l = 0; l < LOADS; ++l) {
    const int i = threadIdx.x + l * THREADS, r = i / (BK / 4), k = (i % (BK / 4)) * 4;
    if (VECS % THREADS == 0 || i < VECS) load4(P, ld, row0 + r, k0 + k, R, K, vec, regs[l]);
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

// Four consecutive values from shared memory: one 16-byte load for float.
template <typename T>
__device__ __forceinline__ void copy4(T* dst, const T* src) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 q = *reinterpret_cast<const float4*>(src);
    dst[0] = q.x, dst[1] = q.y, dst[2] = q.z, dst[3] = q.w;
  } else {
    for (int j = 0; j < 4; ++j) dst[j] = src[j];
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
