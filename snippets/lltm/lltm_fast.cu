// Variant cuda-fast's kernels: lltm_cuda.cu's helpers, forward kernel and backward kernel, made faster, and
// a copy kernel for X. The matmuls stay in lltm_fast.cpp (cuBLASLt). What changes from lltm_cuda.cu:
// - the forward kernel adds the matmul's partial products (split-K) and the bias, and moves 16 bytes at a
//   time (float4 / double2) where the rows are aligned;
// - the backward kernel also sums d_gates over the batch (the bias gradient) in shared memory;
// - the kernels read the tensors they do not allocate through their strides (no .contiguous() copies).
// Like lltm_cuda.cu it includes no torch header: the launchers take raw pointers, so nvcc is fast.
#include <cuda_runtime.h>

#include <cstdint>

#include "lltm_fast.h"  // the launchers' declarations

// Threads per block along the state dimension (the tutorial uses 1024).
constexpr int kThreads = {{threads}};

// lltm_cuda.cu's helpers (which says why they are typed scalar_t throughout, and why expm1); the
// derivatives take the activations: sigmoid'(z) = s (1 - s), tanh'(z) = 1 - t^2, elu'(z) = 1 if z > 0 else
// exp(z) = elu(z) + 1.
template <typename scalar_t>
__device__ __forceinline__ scalar_t sigmoid(scalar_t z) { return scalar_t(1) / (scalar_t(1) + exp(-z)); }
template <typename scalar_t>
__device__ __forceinline__ scalar_t elu(scalar_t z) { return z > scalar_t(0) ? z : expm1(z); }
template <typename scalar_t>
__device__ __forceinline__ scalar_t d_sigmoid(scalar_t s) { return s * (scalar_t(1) - s); }
template <typename scalar_t>
__device__ __forceinline__ scalar_t d_tanh(scalar_t t) { return scalar_t(1) - t * t; }
template <typename scalar_t>
__device__ __forceinline__ scalar_t d_elu(scalar_t e) { return e > scalar_t(0) ? scalar_t(1) : e + scalar_t(1); }

// V consecutive values as one 16-byte load or store (V = 4 floats or 2 doubles); V = 1 is a plain scalar.
template <typename scalar_t, int V>
struct alignas(sizeof(scalar_t) * V) Vec {
  scalar_t v[V];
};

// One thread per (batch row n, V state columns from c). The matmul comes in as `parts` partial products (its
// sum over the columns of X split into parts, lt_matmul.h says why), without the bias: both are added here, and
// the activations go out to gates, for the backward. The kernel only moves memory (it reads each partial
// product once), so it reads and writes V values at a time: fewer, wider memory instructions.
template <typename scalar_t, int V>
__global__ void lltm_forward_kernel(
    const scalar_t* __restrict__ products,  // (parts, batch, 3 * state): X @ weights^T, summed over parts
    int64_t parts,
    const scalar_t* __restrict__ bias,      // (3 * state)
    const scalar_t* __restrict__ old_cell, int64_t old_cell_s0, int64_t old_cell_s1,
    scalar_t* __restrict__ gates,           // (batch, 3 * state): the activations
    scalar_t* __restrict__ new_h,           // (batch, state)
    scalar_t* __restrict__ new_cell,        // (batch, state)
    int64_t batch, int64_t state) {
  using Vector = Vec<scalar_t, V>;
  const int64_t c = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * V;  // first column
  if (c >= state) return;
  const int64_t part_size = batch * 3 * state;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {  // row; loops when batch > 65535 rows of blocks
    Vector z[3];  // input gate, output gate, candidate cell, before their activations
    for (int k = 0; k < 3; ++k) {
      const int64_t j = n * 3 * state + k * state + c;
      z[k] = *reinterpret_cast<const Vector*>(bias + k * state + c);
      for (int64_t p = 0; p < parts; ++p) {
        const Vector product = *reinterpret_cast<const Vector*>(products + p * part_size + j);
        for (int i = 0; i < V; ++i) z[k].v[i] += product.v[i];
      }
    }
    Vector input_gate, output_gate, candidate_cell, cell, h;
    for (int i = 0; i < V; ++i) {
      input_gate.v[i] = sigmoid(z[0].v[i]);
      output_gate.v[i] = sigmoid(z[1].v[i]);
      candidate_cell.v[i] = elu(z[2].v[i]);
      cell.v[i] = old_cell[n * old_cell_s0 + (c + i) * old_cell_s1] + candidate_cell.v[i] * input_gate.v[i];
      h.v[i] = tanh(cell.v[i]) * output_gate.v[i];
    }
    Vector* g = reinterpret_cast<Vector*>(gates + n * 3 * state + c);
    g[0] = input_gate;
    g[state / V] = output_gate;
    g[2 * state / V] = candidate_cell;
    *reinterpret_cast<Vector*>(new_cell + n * state + c) = cell;
    *reinterpret_cast<Vector*>(new_h + n * state + c) = h;
  }
}

// The backward kernel also sums d_gates over the batch (the bias gradient), so that takes no launch of
// its own: a block of 32 columns x kRowThreads rows reduces in shared memory, then adds its sums to d_bias
// (zeroed by the launcher). With batch <= 64 there is one row of blocks and the result is deterministic;
// with more, the order of the float additions varies from run to run.
constexpr int kColumns = 32, kRowThreads = 8, kRowsPerThread = 8;

template <typename scalar_t>
__global__ void lltm_backward_kernel(
    scalar_t* __restrict__ d_gates,     // (batch, 3 * state)
    scalar_t* __restrict__ d_old_cell,  // (batch, state)
    scalar_t* __restrict__ d_bias,      // (3 * state), zero on entry
    const scalar_t* __restrict__ grad_h, int64_t grad_h_s0, int64_t grad_h_s1,
    const scalar_t* __restrict__ grad_cell, int64_t grad_cell_s0, int64_t grad_cell_s1,
    const scalar_t* __restrict__ new_cell,  // (batch, state)
    const scalar_t* __restrict__ gates,     // (batch, 3 * state): the forward's activations
    int64_t batch, int64_t state) {
  __shared__ scalar_t partial[3][kRowThreads][kColumns];
  const int64_t c = blockIdx.x * int64_t(kColumns) + threadIdx.x;
  scalar_t sum[3] = {0, 0, 0};
  if (c < state) {
    const int64_t rows = gridDim.y * int64_t(kRowThreads);  // the grid's threads down the batch
    for (int64_t n = blockIdx.y * int64_t(kRowThreads) + threadIdx.y; n < batch; n += rows) {
      const scalar_t* g = gates + n * 3 * state;
      const scalar_t input_gate = g[c], output_gate = g[state + c], candidate_cell = g[2 * state + c];
      const scalar_t dh = grad_h[n * grad_h_s0 + c * grad_h_s1];
      const scalar_t t = tanh(new_cell[n * state + c]);
      const scalar_t d_new_cell = dh * output_gate * d_tanh(t) + grad_cell[n * grad_cell_s0 + c * grad_cell_s1];
      d_old_cell[n * state + c] = d_new_cell;
      const scalar_t d[3] = {
          d_new_cell * candidate_cell * d_sigmoid(input_gate),  // input gate
          dh * t * d_sigmoid(output_gate),                      // output gate
          d_new_cell * input_gate * d_elu(candidate_cell),      // candidate cell
      };
      for (int k = 0; k < 3; ++k) {
        d_gates[n * 3 * state + k * state + c] = d[k];
        sum[k] += d[k];
      }
    }
  }
  for (int k = 0; k < 3; ++k) partial[k][threadIdx.y][threadIdx.x] = sum[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < state) {
    for (int k = 0; k < 3; ++k) {
      scalar_t s = 0;
      for (int r = 0; r < kRowThreads; ++r) s += partial[k][r][threadIdx.x];
      atomicAdd(d_bias + k * state + c, s);
    }
  }
}

// X = [old_h, input] (batch, state + features), for the matmul and the backward: what at::cat does. One
// thread per column of X, looping over rows, reading each input through its strides.
template <typename scalar_t>
__global__ void lltm_cat_kernel(const scalar_t* __restrict__ old_h, int64_t old_h_s0, int64_t old_h_s1,
                                const scalar_t* __restrict__ input, int64_t input_s0, int64_t input_s1,
                                scalar_t* __restrict__ X, int64_t batch, int64_t state, int64_t features) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // column of X
  if (c >= state + features) return;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    X[n * (state + features) + c] =
        c < state ? old_h[n * old_h_s0 + c * old_h_s1] : input[n * input_s0 + (c - state) * input_s1];
  }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static unsigned grid_rows(int64_t rows) { return unsigned(rows < 65535 ? rows : 65535); }  // gridDim.y limit

template <typename T>
cudaError_t lltm_cat_launch(const T* old_h, int64_t old_h_s0, int64_t old_h_s1, const T* input, int64_t input_s0,
                            int64_t input_s1, T* X, int64_t batch, int64_t state, int64_t features,
                            cudaStream_t stream) {
  if (batch == 0 || state + features == 0) return cudaSuccess;
  // Blocks of 256 columns by up to 128 rows, each thread looping over the rows: a block per row would be
  // many tiny blocks, and the copy would take longer to schedule than to do.
  const dim3 blocks(unsigned(ceil_div(state + features, 256)), unsigned(batch < 128 ? batch : 128));
  lltm_cat_kernel<T><<<blocks, 256, 0, stream>>>(old_h, old_h_s0, old_h_s1, input, input_s0, input_s1, X, batch, state,
                                                  features);
  return cudaGetLastError();
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T>
cudaError_t lltm_forward_launch(const T* products, int64_t parts, const T* bias, const T* old_cell, int64_t old_cell_s0,
                                int64_t old_cell_s1, T* gates, T* new_h, T* new_cell, int64_t batch, int64_t state,
                                cudaStream_t stream) {
  if (batch == 0 || state == 0) return cudaSuccess;
  constexpr int V = 16 / sizeof(T);  // values per 16 bytes
  // Vectors need every row to start on 16 bytes: state a multiple of V, and aligned buffers (lltm_fast.cpp
  // allocates all but bias, which may be a view).
  if (state % V == 0 && aligned16(products) && aligned16(bias) && aligned16(gates) && aligned16(new_h) &&
      aligned16(new_cell)) {
    const dim3 blocks(unsigned(ceil_div(state / V, kThreads)), grid_rows(batch));
    lltm_forward_kernel<T, V><<<blocks, kThreads, 0, stream>>>(products, parts, bias, old_cell, old_cell_s0,
                                                               old_cell_s1, gates, new_h, new_cell, batch, state);
  } else {
    const dim3 blocks(unsigned(ceil_div(state, kThreads)), grid_rows(batch));
    lltm_forward_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(products, parts, bias, old_cell, old_cell_s0,
                                                               old_cell_s1, gates, new_h, new_cell, batch, state);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t lltm_backward_launch(T* d_gates, T* d_old_cell, T* d_bias, const T* grad_h, int64_t grad_h_s0,
                                 int64_t grad_h_s1, const T* grad_cell, int64_t grad_cell_s0, int64_t grad_cell_s1,
                                 const T* new_cell, const T* gates, int64_t batch, int64_t state, cudaStream_t stream) {
  if (cudaError_t err = cudaMemsetAsync(d_bias, 0, 3 * state * sizeof(T), stream)) return err;
  if (batch == 0 || state == 0) return cudaSuccess;
  const dim3 threads(kColumns, kRowThreads);
  const dim3 blocks(unsigned(ceil_div(state, kColumns)), grid_rows(ceil_div(batch, kRowThreads * kRowsPerThread)));
  lltm_backward_kernel<T><<<blocks, threads, 0, stream>>>(d_gates, d_old_cell, d_bias, grad_h, grad_h_s0, grad_h_s1,
                                                          grad_cell, grad_cell_s0, grad_cell_s1, new_cell, gates,
                                                          batch, state);
  return cudaGetLastError();
}

// The two types lltm_fast.cpp calls (it declares the templates; their code is here).
#define LLTM_INSTANTIATE(T)                                                                                          \
  template cudaError_t lltm_cat_launch<T>(const T*, int64_t, int64_t, const T*, int64_t, int64_t, T*, int64_t,      \
                                          int64_t, int64_t, cudaStream_t);                                          \
  template cudaError_t lltm_forward_launch<T>(const T*, int64_t, const T*, const T*, int64_t, int64_t, T*, T*, T*,  \
                                              int64_t, int64_t, cudaStream_t);                                      \
  template cudaError_t lltm_backward_launch<T>(T*, T*, T*, const T*, int64_t, int64_t, const T*, int64_t, int64_t,  \
                                               const T*, const T*, int64_t, int64_t, cudaStream_t);
LLTM_INSTANTIATE(float)
LLTM_INSTANTIATE(double)
