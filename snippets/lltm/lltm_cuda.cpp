// The tutorial's lltm_cuda.cpp: input checks, the matmuls in ATen (cuBLAS), and calls into the fused
// kernels of lltm_cuda.cu for everything pointwise.
// Where this differs from the tutorial, and why:
// - TORCH_LIBRARY instead of PYBIND11_MODULE, and autograd in Python (spec.py's LLTMFunction), as in
//   lltm.cpp; only the ATen headers used, not torch/extension.h.
// - the checks cover shapes, dtypes and devices as well: the kernels index raw memory, and a wrong shape
//   would read past a tensor's end. Inputs need not be contiguous: .contiguous() copies the ones that
//   are not (the tutorial's CHECK_CONTIGUOUS rejects them; autograd hands the backward broadcast
//   gradients, which are not).
// - the forward returns (new_h, new_cell, gates, X), gates holding the activations (lltm_cuda.cu says
//   why), and the backward takes what it needs of them, as in lltm.cpp.
// - the launchers take raw pointers (so lltm_cuda.cu needs no torch header) on PyTorch's current stream,
//   and return the launch's error, which is checked here.
// - scalar_type() and data_ptr<T>() replace the deprecated type() and data<T>(), and empty_like the
//   tutorial's zeros_like: the kernels write every element, so filling them with zeros first is wasted.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>

#include "check_inputs.h"  // shapes, dtypes, devices: shared with lltm.cpp and lltm_fast.cpp

using at::Tensor;

// Defined in lltm_cuda.cu, for float and double.
template <typename scalar_t>
cudaError_t lltm_cuda_forward(scalar_t* gates, const scalar_t* old_cell, scalar_t* new_h, scalar_t* new_cell,
                              int64_t batch, int64_t state, cudaStream_t stream);
template <typename scalar_t>
cudaError_t lltm_cuda_backward(scalar_t* d_old_cell, scalar_t* d_gates, const scalar_t* grad_h,
                               const scalar_t* grad_cell, const scalar_t* new_cell, const scalar_t* gates,
                               int64_t batch, int64_t state, cudaStream_t stream);

#define CHECK_CUDA(x) TORCH_CHECK((x).device().is_cuda(), "lltm (CUDA): " #x " must be a CUDA tensor")
#define CHECK_LAUNCH(call)                                                               \
  do {                                                                                   \
    const cudaError_t err = (call);                                                      \
    TORCH_CHECK(err == cudaSuccess, "lltm (CUDA): ", cudaGetErrorString(err));           \
  } while (0)

std::tuple<Tensor, Tensor, Tensor, Tensor> lltm_forward(const Tensor& input, const Tensor& weights,
                                                        const Tensor& bias, const Tensor& old_h,
                                                        const Tensor& old_cell) {
  CHECK_CUDA(input);  // and so, by check_inputs, every tensor
  check_inputs(input, weights, bias, old_h, old_cell);
  const c10::cuda::CUDAGuard device(input.device());
  Tensor X = at::cat({old_h, input}, /*dim=*/1);
  Tensor gates = at::addmm(bias, X, weights.t()).contiguous();  // the kernel overwrites it with activations
  const Tensor cell = old_cell.contiguous();
  Tensor new_h = at::empty_like(cell);
  Tensor new_cell = at::empty_like(cell);
  const int64_t batch = cell.size(0), state = cell.size(1);
  AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_forward_cuda", [&] {
    CHECK_LAUNCH(lltm_cuda_forward<scalar_t>(gates.data_ptr<scalar_t>(), cell.data_ptr<scalar_t>(),
                                             new_h.data_ptr<scalar_t>(), new_cell.data_ptr<scalar_t>(), batch,
                                             state, c10::cuda::getCurrentCUDAStream()));
  });
  return {new_h, new_cell, gates, X};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> lltm_backward(const Tensor& grad_h, const Tensor& grad_cell,
                                                                 const Tensor& new_cell, const Tensor& gates,
                                                                 const Tensor& X, const Tensor& weights) {
  CHECK_CUDA(gates);
  const int64_t batch = new_cell.size(0), state = new_cell.size(1);
  TORCH_CHECK(gates.is_contiguous() && new_cell.is_contiguous() && gates.sizes() == at::IntArrayRef({batch, 3 * state}),
              "lltm (CUDA): new_cell and gates must come from lltm_forward");
  TORCH_CHECK(grad_h.sizes() == new_cell.sizes() && grad_cell.sizes() == new_cell.sizes(),
              "lltm (CUDA): grad_h and grad_cell must be shaped like new_cell");
  const c10::cuda::CUDAGuard device(gates.device());
  const Tensor gh = grad_h.contiguous(), gc = grad_cell.contiguous();
  Tensor d_old_cell = at::empty_like(new_cell);
  Tensor d_gates = at::empty_like(gates);
  AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_backward_cuda", [&] {
    CHECK_LAUNCH(lltm_cuda_backward<scalar_t>(d_old_cell.data_ptr<scalar_t>(), d_gates.data_ptr<scalar_t>(),
                                              gh.data_ptr<scalar_t>(), gc.data_ptr<scalar_t>(),
                                              new_cell.data_ptr<scalar_t>(), gates.data_ptr<scalar_t>(), batch,
                                              state, c10::cuda::getCurrentCUDAStream()));
  });
  Tensor d_weights = d_gates.t().mm(X);
  Tensor d_bias = d_gates.sum(/*dim=*/0);
  Tensor d_X = d_gates.mm(weights);
  // d_old_h and d_input are d_X's two column blocks; an op's outputs must not share memory, so one is copied.
  Tensor d_old_h = d_X.narrow(/*dim=*/1, 0, state);
  Tensor d_input = d_X.narrow(/*dim=*/1, state, X.size(1) - state).clone();
  return {d_input, d_weights, d_bias, d_old_h, d_old_cell};
}

TORCH_LIBRARY(KPLAY_NS, m) {
  m.def("lltm_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell)"
        " -> (Tensor new_h, Tensor new_cell, Tensor gates, Tensor X)");
  m.def("lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates, Tensor X, Tensor weights)"
        " -> (Tensor d_input, Tensor d_weights, Tensor d_bias, Tensor d_old_h, Tensor d_old_cell)");
}

TORCH_LIBRARY_IMPL(KPLAY_NS, CUDA, m) {
  m.impl("lltm_forward", &lltm_forward);
  m.impl("lltm_backward", &lltm_backward);
}
