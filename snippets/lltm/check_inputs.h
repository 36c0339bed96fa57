// The LLTM's input checks, shared by lltm.cpp, lltm_cuda.cpp and lltm_fast.cpp (task.toml: includes).
// The tutorial checks only CUDA-ness and contiguity; these cover shapes, dtypes and devices as well: the
// kernels index raw memory, and a wrong shape would read past a tensor's end.
// Only <ATen/core/Tensor.h>, which each source includes anyway (and kplay precompiles): no build time added.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

// input (batch, features), old_h and old_cell (batch, state), weights (3 * state, state + features) and
// bias (3 * state), all of input's dtype and on its device.
inline void check_inputs(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                         const at::Tensor& old_h, const at::Tensor& old_cell) {
  TORCH_CHECK(input.dim() == 2 && old_h.dim() == 2 && old_cell.dim() == 2 && weights.dim() == 2 && bias.dim() == 1,
              "lltm: input, old_h, old_cell and weights must be 2-D, bias 1-D");
  const int64_t batch = old_h.size(0), state = old_h.size(1), features = input.size(1);
  TORCH_CHECK(input.size(0) == batch && old_cell.size(0) == batch && old_cell.size(1) == state,
              "lltm: input (batch, features), old_h and old_cell (batch, state) disagree");
  TORCH_CHECK(weights.size(0) == 3 * state && weights.size(1) == state + features && bias.size(0) == 3 * state,
              "lltm: weights must be (3*state, state+features) and bias (3*state)");
  for (const at::Tensor* t : {&weights, &bias, &old_h, &old_cell}) {
    TORCH_CHECK(t->scalar_type() == input.scalar_type() && t->device() == input.device(),
                "lltm: all tensors must share input's dtype and device");
  }
}
