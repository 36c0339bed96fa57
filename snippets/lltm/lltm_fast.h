// The launchers lltm_fast.cu defines and lltm_fast.cpp calls: one declaration, seen by both compilers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

// lltm_fast.cu includes no torch header, so they take raw pointers, strides for the tensors we do not
// allocate ourselves (autograd hands the backward broadcast gradients, stride 0), and the stream.
// Each returns the launch's error.
template <typename T>
cudaError_t lltm_cat_launch(const T* old_h, int64_t old_h_s0, int64_t old_h_s1, const T* input, int64_t input_s0,
                            int64_t input_s1, T* X, int64_t batch, int64_t state, int64_t features,
                            cudaStream_t stream);
template <typename T>
cudaError_t lltm_forward_launch(const T* products, int64_t parts, const T* bias, const T* old_cell, int64_t old_cell_s0,
                                int64_t old_cell_s1, T* gates, T* new_h, T* new_cell, int64_t batch, int64_t state,
                                cudaStream_t stream);
template <typename T>
cudaError_t lltm_backward_launch(T* d_gates, T* d_old_cell, T* d_bias, const T* grad_h, int64_t grad_h_s0,
                                 int64_t grad_h_s1, const T* grad_cell, int64_t grad_cell_s0, int64_t grad_cell_s1,
                                 const T* new_cell, const T* gates, int64_t batch, int64_t state, cudaStream_t stream);
