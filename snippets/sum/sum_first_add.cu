// Step 2 of the ladder: first add during load.
// In the tree, half the threads idle from the first step on. Here each thread adds two elements
// (i and i + kThreads) while loading, so a block covers 2 * kThreads elements and the grid halves.
// Everything else is step 1: shared-memory tree with sequential addressing, multi-pass.
#include "ladder.cuh"  // launch_sum, the multi-pass launcher (cuda_runtime.h only)

constexpr int kThreads = {{threads}};  // threads per block
constexpr int64_t kPerBlock = 2 * kThreads;  // elements one block sums: two per thread, so half the blocks
static_assert(kThreads >= 64 && kThreads <= 1024 && (kThreads & (kThreads - 1)) == 0,
              "the tree halves the block each step: threads must be a power of two in [64, 1024]");

template <typename T>
__global__ void sum_first_add_kernel(const T* __restrict__ in, int64_t n, T* __restrict__ partial) {
  __shared__ T s[kThreads];
  const unsigned tid = threadIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kPerBlock + tid;
  T v = i < n ? in[i] : T(0);
  // kplay:todo Add the block's second element while loading: in[i + kThreads], if it is inside n.
  // kplay:why A block now covers 2 * kThreads elements, so no thread sits idle in the tree's first step, and
  // kplay:why half the blocks do the work.
  if (i + kThreads < n) v += in[i + kThreads];  // the first add, done in registers
  // kplay:end
  s[tid] = v;
  __syncthreads();
  for (unsigned stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) partial[blockIdx.x] = s[0];
}

// The multi-pass launcher is ladder.cuh's: blocks of kPerBlock elements, passes until one value is left.
int64_t sum_workspace_bytes(int64_t n, int64_t element_size) {
  return multipass_workspace_bytes(n, kPerBlock, element_size);
}

template <typename T>
const char* launch(const T* x, int64_t n, T* out, void* workspace, cudaStream_t stream) {
  return launch_passes(sum_first_add_kernel<T>, kThreads, kPerBlock, x, n, out, workspace, stream);
}
