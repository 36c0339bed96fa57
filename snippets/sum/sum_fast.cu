// Step 4 of the ladder: the fast one, single pass.
// - Grid-stride: one wave of blocks (just enough to fill every SM) walks the whole array, so the grid no
//   longer grows with n, and each block writes one partial instead of one per 2 * kThreads elements.
// - 16-byte loads (float4 / double2), four of them in flight per thread: fewer instructions per byte and
//   enough bytes in flight to keep HBM busy.
// - Warp-shuffle block reduction (step 3).
// - Single pass: each block stores its partial and takes a ticket; the block that takes the last ticket
//   sums the partials (in a fixed order, so the result is deterministic) and writes the result. Where one
//   block covers n (4 * kThreads floats, 2 * kThreads doubles) it writes the result itself: one launch, no
//   ticket to zero.
// 16-byte loads need a 16-byte-aligned address: a misaligned view (x[1:]) starts with up to 3 floats
// (1 double) summed one by one before the aligned body; the tail after the last full vector likewise.
#include "ladder.cuh"  // launch_sum and error_or_null (cuda_runtime.h only); not the multi-pass launcher

constexpr int kThreads = {{threads}};  // threads per block
constexpr int kWarps = kThreads / 32;
static_assert(kThreads >= 64 && kThreads <= 1024 && kThreads % 32 == 0,
              "threads must be whole warps in [64, 1024]");

template <typename T> struct Vec16;  // the 16-byte vector of T
template <> struct Vec16<float> { using type = float4; static constexpr int size = 4; };
template <> struct Vec16<double> { using type = double2; static constexpr int size = 2; };

__device__ float add_lanes(float4 v) { return (v.x + v.y) + (v.z + v.w); }
__device__ double add_lanes(double2 v) { return v.x + v.y; }

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
__global__ void __launch_bounds__(kThreads)
sum_fast_kernel(const T* __restrict__ x,  // n elements, any alignment
                int64_t n,
                int64_t head,              // elements before the first 16-byte-aligned address
                T* __restrict__ out,       // the 0-d result
                T* partials,               // one per block
                unsigned* ticket) {        // zeroed before the launch (unused by a grid of one block)
  using V = typename Vec16<T>::type;
  constexpr int kV = Vec16<T>::size;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const V* body = reinterpret_cast<const V*>(x + head);
  const int64_t nvec = (n - head) / kV;

  T acc = 0;
  int64_t i = first;
  // kplay:todo Walk the 16-byte vectors grid-stride: i from first, step stride, acc += add_lanes(body[i]).
  // kplay:why One wave of blocks covers any n by striding, and wide loads in flight keep the memory busy.
  for (; i + 3 * stride < nvec; i += 4 * stride) {  // four independent loads before any add
    const V a = body[i], b = body[i + stride], c = body[i + 2 * stride], d = body[i + 3 * stride];
    acc += (add_lanes(a) + add_lanes(b)) + (add_lanes(c) + add_lanes(d));
  }
  for (; i < nvec; i += stride) acc += add_lanes(body[i]);
  // kplay:end
  const int64_t tail = head + nvec * kV;  // fewer than kV elements before `body` and after it
  if (first < head) acc += x[first];
  if (tail + first < n) acc += x[tail + first];

  acc = block_sum(acc);
  if (gridDim.x == 1) {  // the only block: its sum is the result
    if (threadIdx.x == 0) *out = acc;
    return;
  }
  __shared__ bool last_block;
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = acc;
    __threadfence();  // the partial is visible to every block before the ticket says it is there
    last_block = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last_block) return;
  T total = 0;
  // kplay:todo The last block adds every block's partial (threads stride over them, __ldcg) and thread 0 writes *out.
  // kplay:why The ticket says every partial is written; reading them from L2 (__ldcg) sees other SMs' writes.
  for (unsigned b = threadIdx.x; b < gridDim.x; b += kThreads) {
    total += __ldcg(&partials[b]);  // from L2: other SMs wrote them
  }
  total = block_sum(total);
  if (threadIdx.x == 0) *out = total;
  // kplay:end
}

// Blocks in one full wave on the current device (queried once per device: the answer never changes).
template <typename T>
static int64_t full_wave() {
  static int cached[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device < 64 && cached[device] > 0) return cached[device];
  int sms = 0, per_sm = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sum_fast_kernel<T>, kThreads, 0);
  if (device < 64) cached[device] = sms * per_sm;
  return static_cast<int64_t>(sms) * per_sm;
}

template <typename T>
static int64_t grid_for(int64_t n) {  // a full wave, fewer blocks when n is small
  const int64_t needed = (n + kThreads * Vec16<T>::size - 1) / (kThreads * Vec16<T>::size);
  const int64_t wave = full_wave<T>();
  return needed < wave ? needed : wave;
}

constexpr int64_t kTicketBytes = 16;  // the ticket counter, padded so the partials stay aligned

// Bytes of scratch: the ticket and one partial per block.
int64_t sum_workspace_bytes(int64_t n, int64_t element_size) {
  const int64_t blocks = element_size == sizeof(float) ? grid_for<float>(n) : grid_for<double>(n);
  return kTicketBytes + blocks * element_size;
}

template <typename T>
const char* launch(const T* x, int64_t n, T* out, void* workspace, cudaStream_t stream) {
  const int64_t blocks = grid_for<T>(n);  // n >= 1: the binding answers n == 0 itself
  if (blocks < 1) return "could not query the device for its number of SMs";
  const auto address = reinterpret_cast<uintptr_t>(x);
  int64_t head = static_cast<int64_t>((16 - address % 16) % 16 / sizeof(T));
  if (head > n) head = n;
  auto* ticket = static_cast<unsigned*>(workspace);
  T* partials = reinterpret_cast<T*>(static_cast<char*>(workspace) + kTicketBytes);
  // The scratch is allocated per call (two streams may run the op at once), so its ticket starts as
  // whatever was there: zeroed here, a second launch. A grid of one block takes no ticket.
  if (blocks > 1)
    if (const char* err = error_or_null(cudaMemsetAsync(ticket, 0, sizeof(unsigned), stream))) return err;
  sum_fast_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, head, out, partials, ticket);
  return error_or_null(cudaGetLastError());
}
