// SwiGLU on interleaved (gate, up) pairs (ops/swiglu.h): one thread per hidden unit, fp32 math, the
// pair read as one aligned two-element load.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32)));
}

__device__ inline float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }

template <typename T>
__global__ void swiglu_forward_kernel(const T* in, int64_t count, T* out) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < count; j += int64_t(gridDim.x) * blockDim.x) {
    const float g = load_f(in + 2 * j), u = load_f(in + 2 * j + 1);
    store_f(out + j, g * sigmoid_f(g) * u);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* dout, const T* in, int64_t count, T* din) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < count; j += int64_t(gridDim.x) * blockDim.x) {
    const float g = load_f(in + 2 * j), u = load_f(in + 2 * j + 1), d = load_f(dout + j);
    const float sig = sigmoid_f(g);
    store_f(din + 2 * j, d * u * sig * (1.0f + g * (1.0f - sig)));
    store_f(din + 2 * j + 1, d * g * sig);
  }
}

}  // namespace

void swiglu_forward(DType t, const void* in, int64_t count, void* out, cudaStream_t s) {
  if (count == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, swiglu_forward_kernel<T><<<grid_for(count), kThreads, 0, s>>>(
      static_cast<const T*>(in), count, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void swiglu_backward(DType t, const void* dout, const void* in, int64_t count, void* din, cudaStream_t s) {
  if (count == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, swiglu_backward_kernel<T><<<grid_for(count), kThreads, 0, s>>>(
      static_cast<const T*>(dout), static_cast<const T*>(in), count, static_cast<T*>(din)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
