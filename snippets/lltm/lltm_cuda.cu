// The tutorial's lltm_cuda_kernel.cu: helpers, the fused forward kernel, the fused backward kernel and
// their host launchers. lltm_cuda.cpp does the rest (checks, the matmuls) and calls the launchers.
// Where this differs from the tutorial, and why:
// - no torch header, only cuda_runtime.h: the launchers take raw pointers and sizes (lltm_cuda.cpp
//   unpacks the tensors; no AT_DISPATCH or accessors here), so nvcc compiles this file in about a second
//   instead of 30 to 90.
// - the helpers are typed scalar_t throughout. The tutorial's elu, fmax(0.0, z) + fmin(0.0, exp(z) - 1.0),
//   is fmaxf / fminf in extension-cpp: float32 functions that round float64, so its float64 gradcheck
//   fails (extension-cpp#42). expm1 keeps the digits that exp(z) - 1 loses near 0.
// - the derivatives take the activations, which the forward keeps, not the pre-activations: no sigmoid
//   or exp computed twice.
// - the forward kernel writes the activations over the pre-activations in gates (each thread reads and
//   writes its own three elements), where the tutorial allocates three more tensors.
// - a thread loops over rows when the batch has more than 65535 (the grid's limit in y), indices are
//   int64_t (an int overflows past 2^31 elements), and the block size is a parameter, threads
//   ({{threads}} here; the tutorial's is 1024).
// - kernels run on the caller's stream (PyTorch's current one), and each launcher returns the launch error.
#include <cuda_runtime.h>

#include <cstdint>

constexpr int kThreads = {{threads}};  // threads per block, along the state dimension

template <typename scalar_t>
__device__ __forceinline__ scalar_t sigmoid(scalar_t z) {
  return scalar_t(1) / (scalar_t(1) + exp(-z));
}

template <typename scalar_t>
__device__ __forceinline__ scalar_t elu(scalar_t z) {
  return z > scalar_t(0) ? z : expm1(z);  // alpha = 1
}

// sigmoid'(z) = s (1 - s) with s = sigmoid(z).
template <typename scalar_t>
__device__ __forceinline__ scalar_t d_sigmoid(scalar_t s) {
  return s * (scalar_t(1) - s);
}

// tanh'(z) = 1 - t^2 with t = tanh(z).
template <typename scalar_t>
__device__ __forceinline__ scalar_t d_tanh(scalar_t t) {
  return scalar_t(1) - t * t;
}

// elu'(z) = 1 if z > 0, else exp(z) = e + 1 with e = elu(z).
template <typename scalar_t>
__device__ __forceinline__ scalar_t d_elu(scalar_t e) {
  return e > scalar_t(0) ? scalar_t(1) : e + scalar_t(1);
}

// One thread per (row n, column c of the state): the three gates' activations, the new cell and new_h.
template <typename scalar_t>
__global__ void lltm_cuda_forward_kernel(
    scalar_t* __restrict__ gates,           // (batch, 3 * state): in, X @ weights^T + bias; out, activations
    const scalar_t* __restrict__ old_cell,  // (batch, state)
    scalar_t* __restrict__ new_h,           // (batch, state)
    scalar_t* __restrict__ new_cell,        // (batch, state)
    int64_t batch, int64_t state) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= state) return;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    scalar_t* g = gates + n * 3 * state;
    const int64_t index = n * state + c;
    // kplay:todo Activate the three gates of this row, keep the activations in g, then write new_cell and new_h.
    // kplay:why The gates are g[c], g[state + c] and g[2 * state + c]: sigmoid, sigmoid and elu. Then
    // kplay:why new_cell = old_cell + candidate * input gate and new_h = tanh(new_cell) * output gate.
    // kplay:why One thread does every pointwise step of its element, so each value is read from memory
    // kplay:why once and written once: the fusion the tutorial's CUDA version is for.
    const scalar_t input_gate = sigmoid(g[c]);
    const scalar_t output_gate = sigmoid(g[state + c]);
    const scalar_t candidate_cell = elu(g[2 * state + c]);
    g[c] = input_gate;
    g[state + c] = output_gate;
    g[2 * state + c] = candidate_cell;
    const scalar_t cell = old_cell[index] + candidate_cell * input_gate;
    new_cell[index] = cell;
    new_h[index] = tanh(cell) * output_gate;
    // kplay:end
  }
}

// One thread per (row n, column c): d_old_cell and the gradients of the three gates' pre-activations.
template <typename scalar_t>
__global__ void lltm_cuda_backward_kernel(
    scalar_t* __restrict__ d_old_cell,       // (batch, state)
    scalar_t* __restrict__ d_gates,          // (batch, 3 * state)
    const scalar_t* __restrict__ grad_h,     // (batch, state)
    const scalar_t* __restrict__ grad_cell,  // (batch, state)
    const scalar_t* __restrict__ new_cell,   // (batch, state)
    const scalar_t* __restrict__ gates,      // (batch, 3 * state): the forward's activations
    int64_t batch, int64_t state) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= state) return;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    const scalar_t* g = gates + n * 3 * state;
    scalar_t* d_g = d_gates + n * 3 * state;
    const int64_t index = n * state + c;
    // kplay:todo Backpropagate through new_h and new_cell: write d_old_cell, then each gate's gradient into d_g.
    // kplay:why new_h = tanh(new_cell) * output gate and new_cell = old_cell + candidate * input gate; each
    // kplay:why gate's gradient is times its activation's derivative (d_sigmoid, d_sigmoid, d_elu). These take
    // kplay:why the activations the forward kept in gates (s (1 - s), 1 - t^2, e + 1): nothing is recomputed
    // kplay:why but tanh(new_cell).
    const scalar_t input_gate = g[c], output_gate = g[state + c], candidate_cell = g[2 * state + c];
    const scalar_t tanh_new_cell = tanh(new_cell[index]);

    const scalar_t d_output_gate = tanh_new_cell * grad_h[index];
    const scalar_t d_tanh_new_cell = output_gate * grad_h[index];
    const scalar_t d_new_cell = d_tanh(tanh_new_cell) * d_tanh_new_cell + grad_cell[index];

    d_old_cell[index] = d_new_cell;
    const scalar_t d_candidate_cell = input_gate * d_new_cell;
    const scalar_t d_input_gate = candidate_cell * d_new_cell;

    d_g[c] = d_input_gate * d_sigmoid(input_gate);
    d_g[state + c] = d_output_gate * d_sigmoid(output_gate);
    d_g[2 * state + c] = d_candidate_cell * d_elu(candidate_cell);
    // kplay:end
  }
}

// The tutorial's grid: blocks of kThreads columns, one row of blocks per batch row (at most 65535 of them).
static dim3 grid(int64_t batch, int64_t state) {
  return dim3(unsigned((state + kThreads - 1) / kThreads), unsigned(batch < 65535 ? batch : 65535));
}

template <typename scalar_t>
cudaError_t lltm_cuda_forward(scalar_t* gates, const scalar_t* old_cell, scalar_t* new_h, scalar_t* new_cell,
                              int64_t batch, int64_t state, cudaStream_t stream) {
  if (batch == 0 || state == 0) return cudaSuccess;  // an empty grid is a launch error
  lltm_cuda_forward_kernel<scalar_t><<<grid(batch, state), kThreads, 0, stream>>>(gates, old_cell, new_h, new_cell,
                                                                                  batch, state);
  return cudaGetLastError();
}

template <typename scalar_t>
cudaError_t lltm_cuda_backward(scalar_t* d_old_cell, scalar_t* d_gates, const scalar_t* grad_h,
                               const scalar_t* grad_cell, const scalar_t* new_cell, const scalar_t* gates,
                               int64_t batch, int64_t state, cudaStream_t stream) {
  if (batch == 0 || state == 0) return cudaSuccess;
  lltm_cuda_backward_kernel<scalar_t><<<grid(batch, state), kThreads, 0, stream>>>(
      d_old_cell, d_gates, grad_h, grad_cell, new_cell, gates, batch, state);
  return cudaGetLastError();
}

// The code of the two types lltm_cuda.cpp dispatches to (it sees only the declarations).
#define LLTM_INSTANTIATE(T)                                                                                       \
  template cudaError_t lltm_cuda_forward<T>(T*, const T*, T*, T*, int64_t, int64_t, cudaStream_t);               \
  template cudaError_t lltm_cuda_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                             cudaStream_t);
LLTM_INSTANTIATE(float)
LLTM_INSTANTIATE(double)
