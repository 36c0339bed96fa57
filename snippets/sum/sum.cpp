// The sum of a tensor on the CPU, as a PyTorch op.
//
// The stable ABI (torch/csrc/stable) compiles in about a second, where <torch/extension.h> takes
// half a minute. kplay/stable.h keeps us to what torch 2.10 offers (TORCH_TARGET_VERSION), so this
// builds on any torch kplay supports.
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // aoti_torch_empty_strided
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <vector>

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

constexpr int64_t kLanes = 32;       // independent accumulators: four AVX2 registers of adds in flight
constexpr int64_t kBlock = 4096;     // elements summed in T (128 per lane) before moving into double: bounds the error
constexpr int64_t kChunk = 1 << 16;  // elements per parallel task

// Sum x[begin, end): lanes of T inside a block, blocks into double, the tail one by one.
template <typename T>
double sum_range(const T* x, int64_t begin, int64_t end) {
  double acc[kLanes] = {};
  int64_t i = begin;
  for (; i + kBlock <= end; i += kBlock) {
    T lane[kLanes] = {};
    // kplay:todo Add the block into the lanes: lane[l] += x[i + j + l] for j = 0, kLanes, ... and l < kLanes.
    // kplay:why One accumulator waits for each add to finish; kLanes independent ones keep several vector
    // kplay:why adds in flight, and the compiler turns the inner loop over l into SIMD instructions.
    for (int64_t j = 0; j < kBlock; j += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) lane[l] += x[i + j + l];
    // kplay:end
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += lane[l];
  }
  T lane[kLanes] = {};  // what is left (less than a block): whole rows of lanes, still in T
  for (; i + kLanes <= end; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += x[i + l];
  double total = 0;
  for (int64_t l = 0; l < kLanes; ++l) total += lane[l];
  // kplay:todo Add the tail: the elements after the last whole row of lanes, one by one.
  // kplay:why n is rarely a multiple of kLanes: without the tail, n = 1, 31 or 1025 sum wrong (the blog
  // kplay:why post's kernel never summed it).
  for (; i < end; ++i) total += x[i];
  // kplay:end
  for (int64_t l = 0; l < kLanes; ++l) total += acc[l];
  return total;
}

// One partial sum per chunk, then the partials in order: the same answer on 1 thread or 64.
// n == 0 has no chunks: the empty sum is 0, as torch.sum says.
template <typename T>
double sum_all(const T* x, int64_t n) {
  if (n <= kChunk) return sum_range(x, 0, n);  // one chunk: no task to hand out (small n is all call overhead)
  int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
  // kplay:todo Sum the chunks in parallel: each task sets partial[c] = sum_range of chunk c, for its chunks.
  // kplay:why Chunk c is x[c * kChunk, min(n, (c + 1) * kChunk)). Each task writes only its own partials, so
  // kplay:why threads share nothing, and adding the partials in order gives one answer on 1 thread or 64.
  // kplay:code torch::stable::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
  // kplay:code   for (int64_t c = first; c < last; ++c) partial[c] = 0;  // chunk c's sum here
  // kplay:code });
  torch::stable::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c)
      partial[c] = sum_range(x, c * kChunk, std::min(n, (c + 1) * kChunk));
  });
  // kplay:end
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

// A 0-d tensor of x's dtype on x's device, like torch.sum's result. torch::stable::new_empty would do, but it
// goes through the dispatcher (about 2 us on the CPU box); the shim allocates directly (about 0.7 us), and
// at n = 1000 that is most of the op's time.
static Tensor empty_scalar_like(const Tensor& x) {
  int32_t dtype, device_type, device_index;
  STD_TORCH_CHECK(aoti_torch_get_dtype(x.get(), &dtype) == AOTI_TORCH_SUCCESS &&
                      aoti_torch_get_device_type(x.get(), &device_type) == AOTI_TORCH_SUCCESS &&
                      aoti_torch_get_device_index(x.get(), &device_index) == AOTI_TORCH_SUCCESS,
                  "sum (C++): cannot read x's dtype and device");
  AtenTensorHandle out = nullptr;
  const AOTITorchError made = aoti_torch_empty_strided(0, nullptr, nullptr, dtype, device_type, device_index, &out);
  STD_TORCH_CHECK(made == AOTI_TORCH_SUCCESS, "sum (C++): cannot allocate the result");
  return Tensor(out);
}

Tensor sum(Tensor x) {
  STD_TORCH_CHECK(x.is_cpu(), "sum (C++): x must be on the CPU");
  // A view like x[::2] is copied (the input is never written); a dense x is used as it is, which saves
  // a dispatcher call: at small n, the call's overhead is the whole time.
  Tensor c = x.is_contiguous() ? x : torch::stable::contiguous(x);
  const int64_t n = c.numel();  // every element whatever the shape (not size(0)): a 2-D x sums to one value
  Tensor out = empty_scalar_like(c);
  switch (c.scalar_type()) {
    case ScalarType::Float:
      *static_cast<float*>(out.mutable_data_ptr()) = sum_all(static_cast<const float*>(c.const_data_ptr()), n);
      break;
    case ScalarType::Double:
      *static_cast<double*>(out.mutable_data_ptr()) = sum_all(static_cast<const double*>(c.const_data_ptr()), n);
      break;
    default:
      STD_TORCH_CHECK(false, "sum (C++): expected float32 or float64");
  }
  return out;
}

// KPLAY_NS is the library's name for this build, set by kplay (one per source version).
STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("sum", TORCH_BOX(&sum)); }
