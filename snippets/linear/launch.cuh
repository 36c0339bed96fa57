// What every rung of the matmul ladder's launcher shares: the grid of tiles over C, and the launch's error.
// Included inside the rung's namespace.
#pragma once

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
