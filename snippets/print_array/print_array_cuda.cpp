// The binding for print_array on CUDA: checks the input, makes it dense and calls the launcher in
// print_array.cu (which includes only cuda_runtime.h, so it compiles in seconds).
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // aoti_torch_get_current_cuda_stream (needs -DUSE_CUDA)
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

// Defined in print_array.cu: nullptr on success, else the CUDA error message.
const char* launch_print_array(const int32_t* x, int64_t n, void* stream);
const char* launch_print_array(const int64_t* x, int64_t n, void* stream);
const char* launch_print_array(const float* x, int64_t n, void* stream);
const char* launch_print_array(const double* x, int64_t n, void* stream);

template <typename T>
static void launch(const Tensor& x, void* stream) {
  const char* err = launch_print_array(x.const_data_ptr<T>(), x.numel(), stream);
  STD_TORCH_CHECK(err == nullptr, "print_array (CUDA): ", err);
}

void print_array(Tensor x) {
  STD_TORCH_CHECK(x.is_cuda(), "print_array (CUDA): x must be on a CUDA device");
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Tensor dense = torch::stable::contiguous(x);  // elements in index order, stride 1
  void* stream = nullptr;
  STD_TORCH_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream) == AOTI_TORCH_SUCCESS,
                  "print_array (CUDA): could not get the current CUDA stream");
  switch (dense.scalar_type()) {  // the blog post read every dtype as int*: dispatch on the real one
    case ScalarType::Int: return launch<int32_t>(dense, stream);
    case ScalarType::Long: return launch<int64_t>(dense, stream);
    case ScalarType::Float: return launch<float>(dense, stream);
    case ScalarType::Double: return launch<double>(dense, stream);
    default: STD_TORCH_CHECK(false, "print_array (CUDA): x must be int32, int64, float32 or float64");
  }
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("print_array(Tensor x) -> ()"); }

STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CUDA, m) { m.impl("print_array", TORCH_BOX(&print_array)); }
