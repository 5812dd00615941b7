// T5's CUDA kernels (kernels/t5_kernels.h).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/t5_kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32)));
}

#define T5_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
__global__ void relu_forward_kernel(const T* in, int64_t n, T* out) {
  T5_GRID_STRIDE(i, n) store_f(out + i, fmaxf(load_f(in + i), 0.0f));
}

template <typename T>
__global__ void relu_backward_kernel(const T* dout, const T* in, int64_t n, T* din) {
  T5_GRID_STRIDE(i, n) store_f(din + i, load_f(in + i) > 0.0f ? load_f(dout + i) : 0.0f);
}

__device__ __forceinline__ float gelu_tanh_t(float g) {
  return tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g));
}

template <typename T>
__global__ void geglu_forward_kernel(const T* in, int64_t count, T* out) {
  T5_GRID_STRIDE(j, count) {
    const float g = load_f(in + 2 * j), u = load_f(in + 2 * j + 1);
    store_f(out + j, 0.5f * g * (1.0f + gelu_tanh_t(g)) * u);
  }
}

template <typename T>
__global__ void geglu_backward_kernel(const T* dout, const T* in, int64_t count, T* din) {
  T5_GRID_STRIDE(j, count) {
    const float g = load_f(in + 2 * j), u = load_f(in + 2 * j + 1), d = load_f(dout + j);
    const float c = 0.7978845608028654f, a = 0.044715f, t = gelu_tanh_t(g);
    const float dgelu = 0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * c * (1.0f + 3.0f * a * g * g);
    store_f(din + 2 * j, d * u * dgelu);
    store_f(din + 2 * j + 1, d * 0.5f * g * (1.0f + t));
  }
}

template <typename T>
__global__ void relative_bias_forward_kernel(const T* weight, const int32_t* buckets, int64_t heads, int64_t n,
                                             T* out) {
  T5_GRID_STRIDE(x, heads * n) {
    const int64_t h = x / n, i = x % n;
    out[x] = weight[static_cast<int64_t>(buckets[i]) * heads + h];
  }
}

template <typename T>
__global__ void relative_bias_backward_kernel(const T* dbias, const int32_t* buckets, int64_t heads, int64_t n,
                                              float* dweight) {
  T5_GRID_STRIDE(x, heads * n) {
    const int64_t h = x / n, i = x % n;
    atomicAdd(dweight + static_cast<int64_t>(buckets[i]) * heads + h, load_f(dbias + x));
  }
}

// One block per score row (bi, h, i).
template <typename T>
__global__ void biased_softmax_forward_kernel(T* scores, const T* bias, const uint8_t* pad, int64_t nh, int64_t sq,
                                              int64_t sk, bool causal) {
  const int64_t row = blockIdx.x;
  const int64_t i = row % sq, h = (row / sq) % nh, bi = row / (sq * nh);
  T* r = scores + row * sk;
  const T* br = bias ? bias + (h * sq + i) * sk : nullptr;
  auto allowed = [&](int64_t j) { return (!causal || j <= i) && (!pad || pad[bi * sk + j] != 0); };
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < sk; j += blockDim.x)
    if (allowed(j)) m = fmaxf(m, load_f(r + j) + (br ? load_f(br + j) : 0.0f));
  m = block_reduce<true>(m);
  if (m == -INFINITY) {
    for (int64_t j = threadIdx.x; j < sk; j += blockDim.x) store_f(r + j, 0.0f);
    return;
  }
  float sum = 0;
  for (int64_t j = threadIdx.x; j < sk; j += blockDim.x)
    if (allowed(j)) sum += __expf(load_f(r + j) + (br ? load_f(br + j) : 0.0f) - m);
  sum = block_reduce<false>(sum);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < sk; j += blockDim.x)
    store_f(r + j, allowed(j) ? __expf(load_f(r + j) + (br ? load_f(br + j) : 0.0f) - m) * inv : 0.0f);
}

template <typename T>
__global__ void biased_probs_dropout_kernel(const T* probs, int64_t b, int64_t nh, int64_t head, int64_t sq,
                                            int64_t sk, int64_t dropout_heads, int64_t first, DropoutRule rule,
                                            T* dropped) {
  const int64_t block = sq * sk;
  T5_GRID_STRIDE(x, b * block) {
    const int64_t bi = x / block, e = x % block;
    const float p = load_f(probs + (bi * nh + head) * block + e);
    const uint64_t index = static_cast<uint64_t>((bi * dropout_heads + first + head) * block + e);
    store_f(dropped + x, p != 0.0f && rule.keeps(index) ? p * rule.keep_scale : 0.0f);
  }
}

// One block per row (bi, i) of head `head`.
template <typename T>
__global__ void biased_softmax_backward_kernel(T* dscores, const T* probs, int64_t nh, int64_t head, int64_t sq,
                                               int64_t sk, int64_t dropout_heads, int64_t first, bool dropout,
                                               DropoutRule rule) {
  const int64_t row = blockIdx.x, bi = row / sq, i = row % sq;
  T* d = dscores + row * sk;
  const T* p = probs + ((bi * nh + head) * sq + i) * sk;
  const uint64_t base = static_cast<uint64_t>(((bi * dropout_heads + first + head) * sq + i) * sk);
  auto dprob = [&](int64_t j) {
    const float g = load_f(d + j);
    if (!dropout) return g;
    const float pj = load_f(p + j);
    return pj != 0.0f && rule.keeps(base + static_cast<uint64_t>(j)) ? g * rule.keep_scale : 0.0f;
  };
  float dot = 0;
  for (int64_t j = threadIdx.x; j < sk; j += blockDim.x) dot += load_f(p + j) * dprob(j);
  dot = block_reduce<false>(dot);
  for (int64_t j = threadIdx.x; j < sk; j += blockDim.x) {
    const float v = load_f(p + j) * (dprob(j) - dot);
    store_f(d + j, v);
  }
}

template <typename T, typename B>
__global__ void batch_sum_accumulate_kernel(const T* dscores, int64_t b, int64_t n, B* dbias) {
  T5_GRID_STRIDE(x, n) {
    float sum = load_f(dbias + x);
    for (int64_t bi = 0; bi < b; ++bi) sum += load_f(dscores + bi * n + x);
    store_f(dbias + x, sum);
  }
}

unsigned row_threads(int64_t sk) { return sk >= 256 ? 256u : sk >= 128 ? 128u : sk >= 64 ? 64u : 32u; }

}  // namespace

void relu_forward(DType t, const void* in, int64_t n, void* out, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, relu_forward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
      static_cast<const T*>(in), n, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void relu_backward(DType t, const void* dout, const void* in, int64_t n, void* din, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, relu_backward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
      static_cast<const T*>(dout), static_cast<const T*>(in), n, static_cast<T*>(din)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void geglu_forward(DType t, const void* in, int64_t count, void* out, cudaStream_t s) {
  if (count == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, geglu_forward_kernel<T><<<grid_for(count), kThreads, 0, s>>>(
      static_cast<const T*>(in), count, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void geglu_backward(DType t, const void* dout, const void* in, int64_t count, void* din, cudaStream_t s) {
  if (count == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, geglu_backward_kernel<T><<<grid_for(count), kThreads, 0, s>>>(
      static_cast<const T*>(dout), static_cast<const T*>(in), count, static_cast<T*>(din)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void relative_bias_forward(DType t, const void* weight, const int32_t* buckets, int64_t heads, int64_t n, void* out,
                           cudaStream_t s) {
  if (n * heads == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, relative_bias_forward_kernel<T><<<grid_for(n * heads), kThreads, 0, s>>>(
      static_cast<const T*>(weight), buckets, heads, n, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void relative_bias_backward(DType t, const void* dbias, const int32_t* buckets, int64_t heads, int64_t n,
                            float* dweight, cudaStream_t s) {
  if (n * heads == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, relative_bias_backward_kernel<T><<<grid_for(n * heads), kThreads, 0, s>>>(
      static_cast<const T*>(dbias), buckets, heads, n, dweight));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void biased_softmax_forward(DType t, void* scores, const void* bias, const uint8_t* pad, int64_t b, int64_t nh,
                            int64_t sq, int64_t sk, bool causal, cudaStream_t s) {
  const int64_t rows = b * nh * sq;
  if (rows == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, biased_softmax_forward_kernel<T><<<static_cast<unsigned>(rows), row_threads(sk), 0, s>>>(
      static_cast<T*>(scores), static_cast<const T*>(bias), pad, nh, sq, sk, causal));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void biased_probs_dropout(DType t, const void* probs, int64_t b, int64_t nh, int64_t head, int64_t sq, int64_t sk,
                          int64_t dropout_heads, int64_t dropout_first_head, const DropoutArgs& d, void* dropped,
                          cudaStream_t s) {
  const int64_t n = b * sq * sk;
  if (n == 0) return;
  const DropoutRule rule = make_dropout_rule(d);
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, biased_probs_dropout_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
      static_cast<const T*>(probs), b, nh, head, sq, sk, dropout_heads, dropout_first_head, rule,
      static_cast<T*>(dropped)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void biased_softmax_backward(DType t, void* dscores, const void* probs, int64_t b, int64_t nh, int64_t head,
                             int64_t sq, int64_t sk, int64_t dropout_heads, int64_t dropout_first_head,
                             const DropoutArgs& d, cudaStream_t s) {
  const int64_t rows = b * sq;
  if (rows == 0) return;
  const DropoutRule rule = make_dropout_rule(d);
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, biased_softmax_backward_kernel<T><<<static_cast<unsigned>(rows), row_threads(sk), 0, s>>>(
      static_cast<T*>(dscores), static_cast<const T*>(probs), nh, head, sq, sk, dropout_heads, dropout_first_head,
      d.p > 0.0, rule));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void batch_sum_accumulate(DType t, const void* dscores, int64_t b, int64_t n, DType bias_t, void* dbias,
                          cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, {
    TESSERA_DEVICE_FLOAT_SWITCH(bias_t, B, batch_sum_accumulate_kernel<T, B><<<grid_for(n), kThreads, 0, s>>>(
        static_cast<const T*>(dscores), b, n, static_cast<B*>(dbias)));
  });
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
