// Step 2 of the ladder: first add during load.
// In the tree, half the threads idle from the first step on. Here each thread adds two elements
// (i and i + kThreads) while loading, so a block covers 2 * kThreads elements and the grid halves.
// Everything else is step 1: shared-memory tree with sequential addressing, multi-pass.
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kThreads = {{threads}};  // threads per block
static_assert(kThreads >= 64 && kThreads <= 1024 && (kThreads & (kThreads - 1)) == 0,
              "the tree halves the block each step: threads must be a power of two in [64, 1024]");

template <typename T>
__global__ void sum_first_add_kernel(const T* __restrict__ in, int64_t n, T* __restrict__ partial) {
  __shared__ T s[kThreads];
  const unsigned tid = threadIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * (2 * kThreads) + tid;
  T v = i < n ? in[i] : T(0);
  if (i + kThreads < n) v += in[i + kThreads];  // the first add, done in registers
  s[tid] = v;
  __syncthreads();
  for (unsigned stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) partial[blockIdx.x] = s[0];
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
    sum_first_add_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(in, n, dst);
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
