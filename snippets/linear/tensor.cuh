// What the tensor-core steps share (cuda-mma and up): bfloat16 and float16 inputs (cuda-pipeline also float32,
// as TF32), float32 sums, the output rounded once. The entry points linear_cuda.cpp calls; the PTX the steps
// meet, in order: ldmatrix and mma.sync (cuda-mma), cp.async and the swizzle (cuda-pipeline); and the store of
// C. hopper.cuh adds what the Hopper steps meet. Each step defines
//   template <typename T> const char* launch(A, lda, B, ldb, bias, C, ldc, M, N, K, stream);
// for C[m][n] = bias[n] + sum_k A[m][k] B[n][k], T __nv_bfloat16 or __half. linear_cuda.cpp hands it rows
// of whole 16-byte pieces: K a multiple of 8 and A, B 16-byte aligned (it pads a copy where they are not).
// A step that takes float32 too (as TF32) defines TENSOR_STEP_TAKES_FLOAT before including this, and its
// launch<float> takes float32 operands as they come.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace KPLAY_NS {

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream);  // the step's

template <typename T>
const char* launch_bits(const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, const uint16_t* bias,
                        uint16_t* C, int64_t ldc, int64_t M, int64_t N, int64_t K, void* stream) {
  auto in = [](const uint16_t* p) { return reinterpret_cast<const T*>(p); };
  return launch(in(A), lda, in(B), ldb, in(bias), reinterpret_cast<T*>(C), ldc, M, N, K,
                static_cast<cudaStream_t>(stream));
}

// nullptr on success, else the CUDA error. 16-bit values travel as bits: C++ knows no __nv_bfloat16, __half.
const char* launch_matmul_nt(const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, const uint16_t* bias,
                             uint16_t* C, int64_t ldc, int64_t M, int64_t N, int64_t K, bool bfloat16, void* stream) {
  return (bfloat16 ? launch_bits<__nv_bfloat16> : launch_bits<__half>)(A, lda, B, ldb, bias, C, ldc, M, N, K, stream);
}
// The CUDA-core steps' entry points: float32 where the step takes it (as TF32), else refused.
#ifdef TENSOR_STEP_TAKES_FLOAT
const char* launch_matmul_nt(const float* A, int64_t lda, const float* B, int64_t ldb, const float* bias, float* C,
                             int64_t ldc, int64_t M, int64_t N, int64_t K, void* stream) {
  return launch(A, lda, B, ldb, bias, C, ldc, M, N, K, static_cast<cudaStream_t>(stream));
}
#else
const char* launch_matmul_nt(const float*, int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t,
                             int64_t, int64_t, void*) {
  return "linear: this step takes bfloat16 and float16";
}
#endif
const char* launch_matmul_nt(const double*, int64_t, const double*, int64_t, const double*, double*, int64_t, int64_t,
                             int64_t, int64_t, void*) {
  return "linear: this step takes bfloat16 and float16";
}

// nullptr when the launch went through, else CUDA's words for what went wrong.
inline const char* launch_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// The GPU's compute capability as 10 * major + minor, or 0 when it cannot be read.
inline int compute_capability() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return 0;
  }
  return 10 * major + minor;
}

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Conversions by name: torch's builds define __CUDA_NO_BFLOAT16_CONVERSIONS__ and __CUDA_NO_HALF_CONVERSIONS__.
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
template <typename T>
__device__ __forceinline__ T rounded(float v) {  // to nearest
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return __float2half_rn(v);
}

// ---- cuda-mma: ldmatrix feeds mma.sync ------------------------------------------------------------------

// Four 8 x 8 matrices of 16-bit values from shared memory, one warp-wide instruction: lane l gives the address
// of row l % 8 of matrix l / 8 (16 bytes), and receives in r[i] the two values of row l / 4, columns 2 (l % 4)
// and 2 (l % 4) + 1 of matrix i: exactly the layout mma.sync's fragments want. Read as 8 x 4 float32s, the
// same instruction gives lane l the float at row l / 4, column l % 4: the layout of TF32's fragments.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}

// d += a b for a 16 x 16 tile of A (row-major: k along a row) and a 16 x 8 tile of B (column-major: k along
// a column, as B[n][k] is stored), float32 sums: 4,096 multiply-adds per warp-wide instruction.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// d += a b for a 16 x 8 tile of A and an 8 x 8 tile of B in TF32 (float32 rounded to 10 mantissa bits), float32
// sums: 1,024 multiply-adds per instruction. The fragments hold one float per register, readied by tf32().
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// A float32's bits made ready for the TF32 tensor cores, which read the top 19 bits and drop the low 13. Hopper
// rounds to nearest, ties to even, as cuBLAS does, in one instruction (cvt.rn.tf32.f32: F2FP in the SASS). Before
// it, three: half a TF32 unit in the last place added (to nearest, ties away; a finite overflow goes to inf, as
// it should), after two mins that keep a NaN whose mantissa is nearly all ones (CUDA's own is 0x7fffffff) from
// carrying into the sign: they clamp a negative one's bits (unsigned) and a positive one's (signed) below that.
__device__ __forceinline__ uint32_t tf32(uint32_t bits) {
#if __CUDA_ARCH__ >= 900
  uint32_t rounded;
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(rounded) : "f"(__uint_as_float(bits)));
  return rounded;
#else
  return uint32_t(min(int(min(bits, 0xffffefffu)), 0x7fffefff)) + 0x1000u;
#endif
}

// ---- cuda-pipeline: copies that skip the registers, and a swizzle in place of padding --------------------

// 16 bytes global -> shared without passing through registers; zeros where !inside (src-size 0).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool inside) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(inside ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>  // wait until at most PENDING of this thread's committed groups are still in flight
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// A tile row is 128 bytes, eight 16-byte chunks (8 16-bit values, or 4 floats, each). Chunk c of row r is
// stored at chunk c ^ (r % 8): eight rows' chunk c (what one ldmatrix phase reads) land in eight different
// chunks, so all 32 banks, with no padding. It is the layout the hardware calls the 128-byte swizzle (TMA and
// wgmma read it given a 1,024-byte aligned tile). Returns the chunk's index in such a tile.
__device__ __forceinline__ int swizzled(int r, int c) { return r * 8 + (c ^ (r & 7)); }

// This thread's share of copying one operand, step after step: the ROWS x 128-byte tile of P (R x K, row
// stride ld) at (row0, k0) into a swizzled tile. Piece i is row i / 8, chunk i % 8, for i = thread, + THREADS,
// ... (a warp copies four whole rows): a thread's chunk is the same in every piece and its rows THREADS / 8
// apart, so where its pieces start and which rows are inside are worked out once, and a step adds k0. (An
// index worked out per piece and step cost ~40 instructions a piece; a tile wholly inside, as most are, skips
// the tests for the edges too: an add and a cp.async a piece.) Zeros past the matrix. vec: K is a multiple of
// a chunk's values and the rows 16-byte aligned, so a piece is all inside or all outside and one cp.async
// moves it (an address outside is never read, but must be valid: P itself); else value by value.
template <int ROWS, int THREADS, typename T>
struct TileCopy {
  static_assert(ROWS * 8 % THREADS == 0 && THREADS % 8 == 0, "every thread copies as many pieces, one chunk");
  static constexpr int VALUES = 16 / sizeof(T), PIECES = ROWS * 8 / THREADS, APART = THREADS / 8;
  const T *P, *src;  // src: this thread's first piece at k0 = 0
  int64_t apart;     // elements from one of its pieces to the next
  int r0, c;         // its first piece's row in the tile, and its chunk
  uint32_t rows_in;  // bit n: piece n's row is inside the matrix
  bool all_in;       // every row of the tile is

  __device__ TileCopy(const T* P, int64_t ld, int row0, int R, int thread)
      : P(P), src(P + (row0 + thread / 8) * ld + thread % 8 * VALUES), apart(APART * ld), r0(thread / 8),
        c(thread % 8), rows_in(0), all_in(row0 + ROWS <= R) {
#pragma unroll
    for (int n = 0; n < PIECES; ++n) rows_in |= uint32_t(row0 + r0 + n * APART < R) << n;
  }

  __device__ __forceinline__ void operator()(uint4* tile, int k0, int K, bool vec = true) const {
    const int k = k0 + c * VALUES;
    if (vec && all_in && k0 + 8 * VALUES <= K) {  // the whole tile inside: no tests
      for (int n = 0; n < PIECES; ++n) cp_async16(tile + swizzled(r0 + n * APART, c), src + k0 + n * apart, true);
      return;
    }
    if (vec) {
#pragma unroll
      for (int n = 0; n < PIECES; ++n) {
        const bool inside = (rows_in >> n & 1) && k < K;
        cp_async16(tile + swizzled(r0 + n * APART, c), inside ? src + k0 + n * apart : P, inside);
      }
      return;
    }
#pragma unroll 1
    for (int n = 0; n < PIECES; ++n) {
      union { uint4 chunk; T v[VALUES]; } piece;
      const bool row_in = rows_in >> n & 1;
      for (int j = 0; j < VALUES; ++j) piece.v[j] = row_in && k + j < K ? src[k0 + n * apart + j] : rounded<T>(0.0f);
      tile[swizzled(r0 + n * APART, c)] = piece.chunk;
    }
  }
};

// ---- every step: C from the fragments --------------------------------------------------------------------

// out[0] and out[1] = v0 and v1 rounded to T, in one store (out aligned to the pair's size).
template <typename T>
__device__ __forceinline__ void store_two(T* out, float v0, float v1) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(out) = make_float2(v0, v1);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(v0, v1);
  } else {
    *reinterpret_cast<__half2*>(out) = __floats2half2_rn(v0, v1);
  }
}

// C[m][n] and C[m][n + 1] = v + bias, rounded once to T; columns past N and rows past M skipped. One 4-byte
// store where both columns are in and the pair is aligned (even ldc), else two.
template <typename T>
__device__ __forceinline__ void store_pair(T* C, int64_t ldc, const T* bias, int m, int n, int M, int N, float v0,
                                           float v1) {
  if (m >= M || n >= N) return;
  if (bias != nullptr) {
    v0 += to_float(bias[n]);
    if (n + 1 < N) v1 += to_float(bias[n + 1]);
  }
  T* out = C + m * ldc + n;
  if (n + 1 < N && ldc % 2 == 0) {
    store_two(out, v0, v1);
    return;
  }
  out[0] = rounded<T>(v0);
  if (n + 1 < N) out[1] = rounded<T>(v1);
}

// A warp's mma.sync accumulator for rows m, m + 8, columns n, n + 1, where m = row0 + l / 4 and n = col0 +
// 2 (l % 4) for lane l: d[0], d[1] on row m, d[2], d[3] on row m + 8. wgmma's accumulators repeat it.
template <typename T>
__device__ __forceinline__ void store_fragment(T* C, int64_t ldc, const T* bias, int row0, int col0, int M, int N,
                                               const float* d) {
  const int lane = threadIdx.x % 32, m = row0 + lane / 4, n = col0 + 2 * (lane % 4);
  store_pair(C, ldc, bias, m, n, M, N, d[0], d[1]);
  store_pair(C, ldc, bias, m + 8, n, M, N, d[2], d[3]);
}

}  // namespace KPLAY_NS
