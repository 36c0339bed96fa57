// The binding every CUDA sum variant shares: checks the input, makes it dense, allocates the 0-d result
// and the variant's scratch on the device, and launches on PyTorch's current stream. The math is in the
// variant's .cu, which includes only cuda_runtime.h so that it compiles in seconds.
#include <kplay/stable.h>  // TORCH_TARGET_VERSION: only what torch 2.10 offers
#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // aoti_torch_get_current_cuda_stream (needs -DUSE_CUDA)
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>
#include <vector>

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

// Defined by the variant's .cu. launch_sum returns nullptr on success, else the CUDA error message.
int64_t sum_workspace_bytes(int64_t n, int64_t element_size);
const char* launch_sum(const float* x, int64_t n, float* out, void* workspace, void* stream);
const char* launch_sum(const double* x, int64_t n, double* out, void* workspace, void* stream);

template <typename T>
static void launch(const Tensor& x, const Tensor& out, const Tensor& workspace, void* stream) {
  const char* err = launch_sum(x.const_data_ptr<T>(), x.numel(), out.mutable_data_ptr<T>(),
                               workspace.mutable_data_ptr(), stream);
  STD_TORCH_CHECK(err == nullptr, "sum (CUDA): kernel launch failed: ", err);
}

Tensor sum(Tensor x) {
  STD_TORCH_CHECK(x.is_cuda(), "sum (CUDA): x must be on a CUDA device");
  const ScalarType dtype = x.scalar_type();
  STD_TORCH_CHECK(dtype == ScalarType::Float || dtype == ScalarType::Double,
                  "sum (CUDA): x must be float32 or float64");
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());

  // The kernels walk memory with stride 1: a strided view (x[::2]) becomes one dense copy. A merely
  // misaligned view (x[1:]) is already dense and is passed as is; the kernels cope with its address.
  const Tensor dense = torch::stable::contiguous(x);
  Tensor out = torch::stable::new_empty(dense, std::vector<int64_t>{});  // 0-d, x's dtype and device
  const int64_t n = dense.numel();
  if (n == 0) return torch::stable::zero_(out);  // the empty sum; the launchers assume n >= 1

  const int64_t element_size = static_cast<int64_t>(dense.element_size());
  const Tensor workspace = torch::stable::new_empty(
      dense, std::vector<int64_t>{sum_workspace_bytes(n, element_size)}, ScalarType::Byte);
  void* stream = nullptr;
  STD_TORCH_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream) == AOTI_TORCH_SUCCESS,
                  "sum (CUDA): could not get the current CUDA stream");
  if (dtype == ScalarType::Float) {
    launch<float>(dense, out, workspace, stream);
  } else {
    launch<double>(dense, out, workspace, stream);
  }
  return out;
}

STABLE_TORCH_LIBRARY(KPLAY_NS, m) { m.def("sum(Tensor x) -> Tensor"); }

STABLE_TORCH_LIBRARY_IMPL(KPLAY_NS, CUDA, m) { m.impl("sum", TORCH_BOX(&sum)); }
