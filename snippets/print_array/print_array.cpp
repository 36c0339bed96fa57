// Print every element of a tensor from C++: the first example (easyJIT) of the blog post on PyTorch C++/CUDA
// extensions this family comes from, with its bugs fixed.
//
// The post's version printed "%d\\n" (a literal backslash-n, from escaping inside a Python string),
// read every tensor as int*, whatever its dtype, and would have read a CUDA tensor from the host.
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cinttypes>
#include <cstdio>

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

template <typename T>
void print_values(const Tensor& x, const char* format) {
  const T* data = static_cast<const T*>(x.const_data_ptr());  // the pointer type follows the dtype
  for (int64_t i = 0; i < x.numel(); ++i) std::printf(format, data[i]);
}

void print_array(Tensor x) {
  STD_TORCH_CHECK(x.is_cpu(), "print_array (C++): x must be on the CPU, where this code can read it");
  Tensor c = torch::stable::contiguous(x);
  switch (c.scalar_type()) {
    // kplay:todo One case per dtype, each calling print_values with its C++ type: Int, Long, Float, Double.
    // kplay:why data_ptr() is raw bytes: reading a float tensor as int32_t prints garbage, so the C++ type must
    // kplay:why follow the dtype.
    // kplay:code case ScalarType::Int: print_values<int32_t>(c, "%" PRId32 "\n"); break;  // then Long, Float, Double
    case ScalarType::Int: print_values<int32_t>(c, "%" PRId32 "\n"); break;
    case ScalarType::Long: print_values<int64_t>(c, "%" PRId64 "\n"); break;
    case ScalarType::Float: print_values<float>(c, "%.9g\n"); break;     // 9 digits round-trip a float
    case ScalarType::Double: print_values<double>(c, "%.17g\n"); break;  // 17 digits round-trip a double
    // kplay:stub
    // case ScalarType::Int: case ScalarType::Long: case ScalarType::Float: case ScalarType::Double:
    //   break;  // prints nothing yet
    // kplay:end
    default: STD_TORCH_CHECK(false, "print_array (C++): expected int32, int64, float32 or float64");
  }
  std::fflush(stdout);  // stdio buffers; Python's prints and ours must not interleave
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("print_array(Tensor x) -> ()"); }
STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CPU, m) { m.impl("print_array", TORCH_BOX(&print_array)); }
