// WRONG on purpose: every thread writes to an address no one allocated.
#include <cuda_runtime.h>

__global__ void wild_write(float* out) {
  reinterpret_cast<float*>(0x10)[threadIdx.x] = *out;  // address 0x10: an illegal memory access
}

void launch_wild_write(float* out) { wild_write<<<1, 32>>>(out); }
