// Step 3 of the ladder: warp-shuffle reduction.
// Step 2's shared-memory tree needs a __syncthreads() per halving. Inside a warp, __shfl_down_sync
// passes values register to register with no shared memory and no barrier, so each warp reduces its
// 32 values in 5 shuffles; shared memory only carries one value per warp, and warp 0 adds those.
// Loading (first add during load) and the multi-pass launcher are step 2's.
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kThreads = {{threads}};  // threads per block
constexpr int kWarps = kThreads / 32;
static_assert(kThreads >= 64 && kThreads <= 1024 && kThreads % 32 == 0,
              "threads must be whole warps in [64, 1024]");

template <typename T>
__device__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;  // lane 0 holds the warp's sum
}

template <typename T>
__device__ T block_sum(T v) {
  __shared__ T warp_sums[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum(lane < kWarps ? warp_sums[lane] : T(0));
  return v;  // thread 0 holds the block's sum
}

template <typename T>
__global__ void sum_shuffle_kernel(const T* __restrict__ in, int64_t n, T* __restrict__ partial) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * (2 * kThreads) + threadIdx.x;
  T v = i < n ? in[i] : T(0);
  if (i + kThreads < n) v += in[i + kThreads];  // first add during load, as in step 2
  v = block_sum(v);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

static int64_t blocks_for(int64_t n) { return (n + 2 * kThreads - 1) / (2 * kThreads); }

static const char* error_or_null(cudaError_t err) { return err == cudaSuccess ? nullptr : cudaGetErrorString(err); }

// Bytes of scratch: the partials of every pass but the last, which writes the result itself.
int64_t sum_workspace_bytes(int64_t n, int64_t element_size) {
  int64_t total = 0;
  for (int64_t b = blocks_for(n); b > 1; b = blocks_for(b)) total += b;
  return total * element_size;
}

template <typename T>
static const char* launch(const T* x, int64_t n, T* out, void* workspace, cudaStream_t stream) {
  const T* in = x;
  T* next = static_cast<T*>(workspace);
  for (;;) {  // n >= 1: the binding answers n == 0 itself
    const int64_t blocks = blocks_for(n);
    if (blocks > 0x7fffffff) return "too many elements for one grid of 2^31 - 1 blocks";
    T* dst = blocks == 1 ? out : next;
    sum_shuffle_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(in, n, dst);
    if (const char* err = error_or_null(cudaGetLastError())) return err;
    if (blocks == 1) return nullptr;
    in = next;       // the next pass reads these partials
    next += blocks;  // and writes its own after them
    n = blocks;
  }
}

// nullptr on success, else the CUDA error. `stream` is the caller's current cudaStream_t.
const char* launch_sum(const float* x, int64_t n, float* out, void* workspace, void* stream) {
  return launch(x, n, out, workspace, static_cast<cudaStream_t>(stream));
}
const char* launch_sum(const double* x, int64_t n, double* out, void* workspace, void* stream) {
  return launch(x, n, out, workspace, static_cast<cudaStream_t>(stream));
}
