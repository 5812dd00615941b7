// Deterministic scalar reductions (deterministic mode, kernels.h): each block writes its partial sum
// to partials[block] instead of an atomicAdd, and add_partials_in_order adds the partials to *total
// with one block in a fixed order (thread t sums partials t, t + 256, ... in turn, then a fixed tree).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tessera/core/cuda_check.h"

namespace tessera::kernels {

constexpr int kPartialsThreads = 256;

template <int kThreads>
__global__ void add_partials_in_order_kernel(const double* partials, int64_t n, double* total) {
  __shared__ double sums[kThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) acc += partials[i];
  sums[threadIdx.x] = acc;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width >>= 1) {
    if (threadIdx.x < width) sums[threadIdx.x] += sums[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *total += sums[0];
}

inline void add_partials_in_order(const double* partials, int64_t n, double* total, cudaStream_t s) {
  add_partials_in_order_kernel<kPartialsThreads><<<1, kPartialsThreads, 0, s>>>(partials, n, total);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::kernels
