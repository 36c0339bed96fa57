// Step 2 of the matmul ladder (cuda-smem): tiles through shared memory, each value copied once, read TILE times.
// From step 1: the block copies a TILE x TILE slice of A and of B to shared memory, then multiplies from there.
//
// C[m][n] = bias[n] + sum_k A[m][k] B[n][k]; the forward calls it with A = x, B = W. A block of TILE x TILE
// threads computes a TILE x TILE tile of C. It walks k in steps of TILE: the block copies a TILE x TILE slice
// of A and one of B into shared memory (each thread one value of each), then every thread reads its row of
// the A slice and its row of the B slice from there. Each value copied is read TILE times from shared
// memory: global loads per multiply-add fall from 2 (step 1) to 2 / TILE, 1/16 at TILE = 32. Two values are
// still read from shared memory per multiply-add.
//
// (The literature's step before this one, "global memory coalescing", has no equivalent here: in
// y = x W^T both operands run contiguously along k, so the naive kernel's warp already writes 32
// neighbouring outputs and shares one row of A; the copy below reads TILE consecutive k of a row.)
#include "ladder.cuh"  // launch_matmul_nt, tile_grid, launch_error

namespace KPLAY_NS {

constexpr int TILE = {{tile}};  // the block is TILE x TILE threads, and so is each tile
static_assert(TILE == 8 || TILE == 16 || TILE == 32, "TILE x TILE threads: 64, 256 or 1024");

template <typename T>
__global__ void __launch_bounds__(TILE * TILE)
matmul_nt_smem(const T* __restrict__ A, int64_t lda,  // (M, K), row stride lda
               const T* __restrict__ B, int64_t ldb,  // (N, K), row stride ldb
               const T* __restrict__ bias,            // (N,) or nullptr
               T* __restrict__ C, int64_t ldc,        // (M, N), row stride ldc
               int64_t M, int64_t N, int64_t K) {
  // Bs is read down a column (Bs[tx][k] across a warp's tx): padded by one so that the 32 reads land in
  // 32 different banks. Without the + 1, TILE = 32 puts them all in one bank, a 32-way conflict.
  __shared__ T As[TILE][TILE];
  __shared__ T Bs[TILE][TILE + 1];

  const int tx = threadIdx.x % TILE, ty = threadIdx.x / TILE;  // TILE = 32: a warp is 32 tx (n) of one ty
  const int64_t m0 = blockIdx.y * int64_t(TILE), n0 = blockIdx.x * int64_t(TILE);
  const int64_t m = m0 + ty, n = n0 + tx;

  T acc = 0;
  for (int64_t k0 = 0; k0 < K; k0 += TILE) {
    // kplay:todo As[ty][tx] = A[m0 + ty][k0 + tx], Bs[ty][tx] = B[n0 + ty][k0 + tx]; 0 outside the matrices.
    // kplay:why Neighbouring threads read neighbouring k of one row: whole 32-byte sectors. The zeros
    // kplay:why make a ragged last tile add nothing.
    const int64_t k = k0 + tx;
    As[ty][tx] = (m0 + ty < M && k < K) ? A[(m0 + ty) * lda + k] : T(0);
    Bs[ty][tx] = (n0 + ty < N && k < K) ? B[(n0 + ty) * ldb + k] : T(0);
    // kplay:end
    __syncthreads();  // the tiles are complete before anyone reads them

    // kplay:todo acc += As[ty][kk] * Bs[tx][kk] for every kk of the tile.
    // kplay:why Every value in shared memory is read by TILE threads: global memory is read once per tile.
#pragma unroll
    for (int kk = 0; kk < TILE; ++kk) acc += As[ty][kk] * Bs[tx][kk];
    // kplay:end
    __syncthreads();  // everyone is done with the tiles before the next step overwrites them
  }
  if (m < M && n < N) C[m * ldc + n] = acc + (bias ? bias[n] : T(0));
}

template <typename T>
const char* launch(const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C, int64_t ldc, int64_t M,
                   int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return nullptr;  // nothing to write; an empty grid is a launch error
  dim3 blocks;
  if (const char* err = tile_grid(M, N, TILE, TILE, blocks)) return err;
  matmul_nt_smem<T><<<blocks, TILE * TILE, 0, stream>>>(A, lda, B, ldb, bias, C, ldc, M, N, K);
  return launch_error();
}

}  // namespace KPLAY_NS
