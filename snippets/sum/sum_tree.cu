// Step 1 of the ladder: the textbook shared-memory tree (sequential addressing).
// Each block loads kThreads elements into shared memory, halves the active threads each step and writes
// one partial sum; the launcher repeats on the partials until one value is left (multi-pass).
// Unlike the blog post's sumArray: the grid rounds up (the tail is summed), indices are 64-bit (n may exceed 2^31), and
// the partials go to a workspace (the input is never overwritten).
#include "ladder.cuh"  // launch_sum, the multi-pass launcher (cuda_runtime.h only)

constexpr int kThreads = {{threads}};  // threads per block
constexpr int64_t kPerBlock = kThreads;  // elements one block sums: one per thread
static_assert(kThreads >= 64 && kThreads <= 1024 && (kThreads & (kThreads - 1)) == 0,
              "the tree halves the block each step: threads must be a power of two in [64, 1024]");

template <typename T>
__global__ void sum_tree_kernel(const T* __restrict__ in, int64_t n, T* __restrict__ partial) {
  __shared__ T s[kThreads];
  const unsigned tid = threadIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kPerBlock + tid;
  s[tid] = i < n ? in[i] : T(0);  // threads past the end add zero
  __syncthreads();
  // Sequential addressing: the active threads are the first `stride` ones (whole warps stay idle
  // instead of diverging) and they read consecutive words (no shared-memory bank conflicts).
  // kplay:todo Halve the active threads each step: stride = kThreads/2 down to 1, threads below it add s[tid + stride].
  // kplay:why Each step adds pairs in parallel, so kThreads values take log2(kThreads) steps; call
  // kplay:why __syncthreads() after each one.
  for (unsigned stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  // kplay:end
  if (tid == 0) partial[blockIdx.x] = s[0];
}

// The multi-pass launcher is ladder.cuh's: blocks of kPerBlock elements, passes until one value is left.
int64_t sum_workspace_bytes(int64_t n, int64_t element_size) {
  return multipass_workspace_bytes(n, kPerBlock, element_size);
}

template <typename T>
const char* launch(const T* x, int64_t n, T* out, void* workspace, cudaStream_t stream) {
  return launch_passes(sum_tree_kernel<T>, kThreads, kPerBlock, x, n, out, workspace, stream);
}
