// What every rung of the sum ladder shares: the entry points sum_cuda.cpp calls, and the multi-pass
// launcher of steps 1-3. Each rung's .cu holds its kernel and what it changes; it defines
//   int64_t sum_workspace_bytes(int64_t n, int64_t element_size);   // scratch the binding allocates
//   template <typename T> const char* launch(const T* x, int64_t n, T* out, void* workspace, cudaStream_t stream);
// with n >= 1 (the binding answers n == 0 itself). Only cuda_runtime.h: it compiles in seconds.
#pragma once
#include <cuda_runtime.h>
#include <cstdint>

inline const char* error_or_null(cudaError_t err) { return err == cudaSuccess ? nullptr : cudaGetErrorString(err); }

template <typename T>
const char* launch(const T* x, int64_t n, T* out, void* workspace, cudaStream_t stream);  // the rung's

// nullptr on success, else the CUDA error. `stream` is the caller's current cudaStream_t.
const char* launch_sum(const float* x, int64_t n, float* out, void* workspace, void* stream) {
  return launch(x, n, out, workspace, static_cast<cudaStream_t>(stream));
}
const char* launch_sum(const double* x, int64_t n, double* out, void* workspace, void* stream) {
  return launch(x, n, out, workspace, static_cast<cudaStream_t>(stream));
}

// Multi-pass (steps 1-3): each block sums `per_block` elements into one partial; the launcher repeats
// on the partials until one block is left, and that block writes the result.

// Blocks to cover n elements. The grid rounds up, so the tail is summed (sumArray's n / threads dropped it).
inline int64_t blocks_for(int64_t n, int64_t per_block) { return (n + per_block - 1) / per_block; }

// Bytes of scratch: the partials of every pass but the last, which writes the result itself. Partials
// go to this workspace, never over the input (sumArray reduced in place and destroyed it).
inline int64_t multipass_workspace_bytes(int64_t n, int64_t per_block, int64_t element_size) {
  int64_t total = 0;
  for (int64_t b = blocks_for(n, per_block); b > 1; b = blocks_for(b, per_block)) total += b;
  return total * element_size;
}

// kernel(in, n, partial) writes partial[blockIdx.x]: the sum of its block's `per_block` elements of in.
template <typename T>
const char* launch_passes(void (*kernel)(const T*, int64_t, T*), int threads, int64_t per_block,
                          const T* x, int64_t n, T* out, void* workspace, cudaStream_t stream) {
  const T* in = x;
  T* next = static_cast<T*>(workspace);
  for (;;) {
    const int64_t blocks = blocks_for(n, per_block);
    if (blocks > 0x7fffffff) return "too many elements for one grid of 2^31 - 1 blocks";
    T* dst = blocks == 1 ? out : next;
    kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(in, n, dst);
    if (const char* err = error_or_null(cudaGetLastError())) return err;
    if (blocks == 1) return nullptr;
    in = next;       // the next pass reads these partials
    next += blocks;  // and writes its own after them
    n = blocks;
  }
}
