// print_array on the GPU: device printf, one thread, so the lines come out in index order.
// Unlike the blog post's version: the format matches the dtype ("\n" is a real newline here: this is a C++ file, not a
// Python string), and the data is read on the device that holds it.
// Device printf writes into a FIFO (1 MB by default) that the host prints only at a synchronization
// point; lines that do not fit are dropped. So the launcher prints in chunks and synchronizes after each.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>

__device__ void print_one(int32_t v) { printf("%d\n", v); }
__device__ void print_one(int64_t v) { printf("%lld\n", static_cast<long long>(v)); }
__device__ void print_one(float v) { printf("%.9g\n", v); }    // 9 significant digits round-trip a float
__device__ void print_one(double v) { printf("%.17g\n", v); }  // 17 round-trip a double

template <typename T>
__global__ void print_array_kernel(const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) print_one(x[i]);
}

static const char* error_or_null(cudaError_t err) { return err == cudaSuccess ? nullptr : cudaGetErrorString(err); }

template <typename T>
static const char* launch(const T* x, int64_t n, cudaStream_t stream) {
  constexpr int64_t kChunk = 4096;  // lines per launch: 4096 records fit the 1 MB FIFO with room to spare
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t count = n - start < kChunk ? n - start : kChunk;
    print_array_kernel<T><<<1, 1, 0, stream>>>(x + start, count);
    if (const char* err = error_or_null(cudaGetLastError())) return err;
    if (const char* err = error_or_null(cudaStreamSynchronize(stream))) return err;  // prints the FIFO
  }
  std::fflush(stdout);  // the driver prints through C stdio: hand the lines to the terminal now
  return nullptr;
}

// nullptr on success, else the CUDA error. `s` is the caller's current cudaStream_t.
static cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
const char* launch_print_array(const int32_t* x, int64_t n, void* s) { return launch(x, n, as_stream(s)); }
const char* launch_print_array(const int64_t* x, int64_t n, void* s) { return launch(x, n, as_stream(s)); }
const char* launch_print_array(const float* x, int64_t n, void* s) { return launch(x, n, as_stream(s)); }
const char* launch_print_array(const double* x, int64_t n, void* s) { return launch(x, n, as_stream(s)); }
