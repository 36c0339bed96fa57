// Step 3 of the ladder: warp-shuffle reduction.
// Step 2's shared-memory tree needs a __syncthreads() per halving. Inside a warp, __shfl_down_sync
// passes values register to register with no shared memory and no barrier, so each warp reduces its
// 32 values in 5 shuffles; shared memory only carries one value per warp, and warp 0 adds those.
// Loading (first add during load) and the multi-pass launcher are step 2's.
#include "ladder.cuh"  // launch_sum, the multi-pass launcher (cuda_runtime.h only)

constexpr int kThreads = {{threads}};  // threads per block
constexpr int64_t kPerBlock = 2 * kThreads;  // elements one block sums: two per thread, as in step 2
constexpr int kWarps = kThreads / 32;
static_assert(kThreads >= 64 && kThreads <= 1024 && kThreads % 32 == 0,
              "threads must be whole warps in [64, 1024]");

template <typename T>
__device__ T warp_sum(T v) {
  // kplay:todo Add up the warp's 32 values: add the value `offset` lanes down, for offset 16, 8, 4, 2, 1.
  // kplay:why A shuffle reads another lane's register directly: no shared memory and no __syncthreads() inside a warp.
  // kplay:code v += __shfl_down_sync(0xffffffffu, v, 16);  // then 8, 4, 2 and 1
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  // kplay:end
  return v;  // lane 0 holds the warp's sum
}

template <typename T>
__device__ T block_sum(T v) {
  __shared__ T warp_sums[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  // kplay:todo Lane 0 of each warp stores its sum in warp_sums[warp]; after __syncthreads(), warp 0 adds those.
  // kplay:why Warps cannot read each other's registers: shared memory carries one value per warp, and the
  // kplay:why barrier waits for all of them. Warp 0 adds them with warp_sum.
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum(lane < kWarps ? warp_sums[lane] : T(0));
  // kplay:end
  return v;  // thread 0 holds the block's sum
}

template <typename T>
__global__ void sum_shuffle_kernel(const T* __restrict__ in, int64_t n, T* __restrict__ partial) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kPerBlock + threadIdx.x;
  T v = i < n ? in[i] : T(0);
  if (i + kThreads < n) v += in[i + kThreads];  // first add during load, as in step 2
  v = block_sum(v);
  // kplay:todo Thread 0 writes the block's sum to partial[blockIdx.x].
  // kplay:why Only thread 0 holds the whole block's sum; the launcher adds the partials in the next pass.
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
  // kplay:end
}

// The multi-pass launcher is ladder.cuh's: blocks of kPerBlock elements, passes until one value is left.
int64_t sum_workspace_bytes(int64_t n, int64_t element_size) {
  return multipass_workspace_bytes(n, kPerBlock, element_size);
}

template <typename T>
const char* launch(const T* x, int64_t n, T* out, void* workspace, cudaStream_t stream) {
  return launch_passes(sum_shuffle_kernel<T>, kThreads, kPerBlock, x, n, out, workspace, stream);
}
