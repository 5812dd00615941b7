// Elementwise CUDA kernels: GeLU (tanh) with optional fused bias, counter-based dropout, add, scale,
// fill, dtype conversion (GeLU and add on 16-byte packs where aligned: vec16.cuh), sum of squares (grad norm) and AdamW (bias-gradient column sums: column_sums.cu).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/det_partials.cuh"
#include "kernels/kernels.h"
#include "kernels/vec16.cuh"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32)));
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

__device__ __forceinline__ float gelu_value(float x) {
  const float t = tanhf(kGeluK * (x + 0.044715f * x * x * x));
  return 0.5f * x * (1.0f + t);
}

__device__ __forceinline__ float gelu_grad(float x, float dy) {
  const float t = tanhf(kGeluK * (x + 0.044715f * x * x * x));
  const float dt = kGeluK * (1.0f + 3.0f * 0.044715f * x * x) * (1.0f - t * t);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * dt);
}

template <typename T>
__global__ void gelu_forward_kernel(const T* in, const T* bias, int64_t n, int64_t cols, T* out) {
  GRID_STRIDE(i, n) {
    float x = load_f(in + i);
    if (bias) x += load_f(bias + i % cols);
    store_f(out + i, gelu_value(x));
  }
}

// The same on 16-byte packs (cols a multiple of the pack: a pack never straddles a row).
template <typename T>
__global__ void gelu_forward_vec_kernel(const T* in, const T* bias, int64_t packs, int64_t col_packs, T* out) {
  constexpr int kN = kVec16<T>;
  GRID_STRIDE(p, packs) {
    float x[kN];
    load_pack(in, p, x);
    if (bias) {
      float b[kN];
      load_pack(bias, p % col_packs, b);
#pragma unroll
      for (int k = 0; k < kN; ++k) x[k] += b[k];
    }
#pragma unroll
    for (int k = 0; k < kN; ++k) x[k] = gelu_value(x[k]);
    store_pack(out, p, x);
  }
}

template <typename T>
__global__ void gelu_backward_kernel(const T* dout, const T* in, int64_t n, T* din) {
  GRID_STRIDE(i, n) store_f(din + i, gelu_grad(load_f(in + i), load_f(dout + i)));
}

template <typename T>
__global__ void gelu_backward_vec_kernel(const T* dout, const T* in, int64_t packs, T* din) {
  constexpr int kN = kVec16<T>;
  GRID_STRIDE(p, packs) {
    float x[kN], dy[kN];
    load_pack(in, p, x);
    load_pack(dout, p, dy);
#pragma unroll
    for (int k = 0; k < kN; ++k) x[k] = gelu_grad(x[k], dy[k]);
    store_pack(din, p, x);
  }
}

template <typename T>
__global__ void activation_forward_kernel(bool is_tanh, const T* in, int64_t n, T* out) {
  GRID_STRIDE(i, n) {
    const float x = load_f(in + i);
    store_f(out + i, is_tanh ? tanhf(x) : 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)));
  }
}

template <typename T>
__global__ void activation_backward_kernel(bool is_tanh, const T* dout, const T* in, int64_t n, T* din) {
  GRID_STRIDE(i, n) {
    const float x = load_f(in + i);
    float d;
    if (is_tanh) {
      const float t = tanhf(x);
      d = 1.0f - t * t;
    } else {
      d = 0.5f * (1.0f + erff(x * 0.7071067811865476f)) + x * 0.3989422804014327f * expf(-0.5f * x * x);
    }
    store_f(din + i, load_f(dout + i) * d);
  }
}

template <typename T>
__global__ void dropout_kernel(const T* in, int64_t n, DropoutRule rule, T* out) {
  GRID_STRIDE(i, n) {
    const float x = load_f(in + i);
    store_f(out + i, rule.keeps(static_cast<uint64_t>(i)) ? x * rule.keep_scale : 0.0f);
  }
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, int64_t n, T* out) {
  GRID_STRIDE(i, n) store_f(out + i, load_f(a + i) + load_f(b + i));
}

template <typename T>
__global__ void add_vec_kernel(const T* a, const T* b, int64_t packs, T* out) {
  constexpr int kN = kVec16<T>;
  GRID_STRIDE(p, packs) {
    float x[kN], y[kN];
    load_pack(a, p, x);
    load_pack(b, p, y);
#pragma unroll
    for (int k = 0; k < kN; ++k) x[k] += y[k];
    store_pack(out, p, x);
  }
}

template <typename T>
__global__ void scale_kernel(T* dst, int64_t n, float factor) {
  GRID_STRIDE(i, n) store_f(dst + i, load_f(dst + i) * factor);
}

template <typename T>
__global__ void fill_float_kernel(T* dst, int64_t n, float value) {
  GRID_STRIDE(i, n) store_f(dst + i, value);
}

template <typename T>
__global__ void fill_int_kernel(T* dst, int64_t n, T value) {
  GRID_STRIDE(i, n) dst[i] = value;
}

template <typename S, typename D>
__global__ void convert_kernel(const S* src, int64_t n, D* dst) {
  GRID_STRIDE(i, n) store_f(dst + i, load_f(src + i));
}

template <typename T>
__global__ void sum_of_squares_kernel(const T* x, int64_t n, double* total, double* partials) {
  float acc = 0.0f;
  GRID_STRIDE(i, n) {
    const float v = load_f(x + i);
    acc += v * v;
  }
  acc = block_reduce<false>(acc);
  if (threadIdx.x == 0) {
    if (partials) partials[blockIdx.x] = static_cast<double>(acc);  // deterministic mode
    else atomicAdd(total, static_cast<double>(acc));
  }
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float bc1, float bc2) {
  GRID_STRIDE(i, n) {
    float p = param[i];
    const float g = grad[i];
    p -= lr * weight_decay * p;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = p - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
  }
}

}  // namespace

void gelu_forward(DType t, const void* in, const void* bias, int64_t n, int64_t cols, void* out, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, {
    if (vec16_fits<T>(n, bias ? cols : 0, {in, bias, out}))
      gelu_forward_vec_kernel<T><<<grid_for(n / kVec16<T>), kThreads, 0, s>>>(
          static_cast<const T*>(in), static_cast<const T*>(bias), n / kVec16<T>, bias ? cols / kVec16<T> : 1,
          static_cast<T*>(out));
    else
      gelu_forward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(in), static_cast<const T*>(bias), n,
                                                              cols, static_cast<T*>(out));
  });
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void gelu_backward(DType t, const void* dout, const void* in, int64_t n, void* din, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, {
    if (vec16_fits<T>(n, 0, {dout, in, din}))
      gelu_backward_vec_kernel<T><<<grid_for(n / kVec16<T>), kThreads, 0, s>>>(
          static_cast<const T*>(dout), static_cast<const T*>(in), n / kVec16<T>, static_cast<T*>(din));
    else
      gelu_backward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(dout), static_cast<const T*>(in),
                                                               n, static_cast<T*>(din));
  });
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void activation_forward(bool is_tanh, DType t, const void* in, int64_t n, void* out, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, activation_forward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
      is_tanh, static_cast<const T*>(in), n, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void activation_backward(bool is_tanh, DType t, const void* dout, const void* in, int64_t n, void* din,
                         cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, activation_backward_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
      is_tanh, static_cast<const T*>(dout), static_cast<const T*>(in), n, static_cast<T*>(din)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

DropoutRule make_dropout_rule(const DropoutArgs& d) {
  DropoutRule rule;
  rule.seed = d.seed;
  rule.stream = d.stream;
  rule.offset = d.offset;
  rule.keep_threshold = static_cast<uint32_t>(std::ceil(d.p * 16777216.0));
  rule.keep_scale = static_cast<float>(1.0 / (1.0 - d.p));
  return rule;
}

void dropout_apply(DType t, const void* in, int64_t n, const DropoutArgs& d, void* out, cudaStream_t s) {
  if (n == 0) return;
  if (d.p == 0.0) {
    if (in != out)
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<size_t>(n) * dtype_size(t), cudaMemcpyDeviceToDevice, s));
    return;
  }
  const DropoutRule rule = make_dropout_rule(d);
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, dropout_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
      static_cast<const T*>(in), n, rule, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void add(DType t, const void* a, const void* b, int64_t n, void* out, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, {
    if (vec16_fits<T>(n, 0, {a, b, out}))
      add_vec_kernel<T><<<grid_for(n / kVec16<T>), kThreads, 0, s>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                                     n / kVec16<T>, static_cast<T*>(out));
    else
      add_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(a), static_cast<const T*>(b), n,
                                                     static_cast<T*>(out));
  });
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void scale(DType t, void* dst, int64_t n, double factor, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, scale_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
      static_cast<T*>(dst), n, static_cast<float>(factor)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void fill(DType t, void* dst, int64_t n, double value, cudaStream_t s) {
  if (n == 0) return;
  switch (t) {
    case DType::i32: fill_int_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<int32_t*>(dst), n, int32_t(value)); break;
    case DType::i64: fill_int_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<int64_t*>(dst), n, int64_t(value)); break;
    case DType::u16: fill_int_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<uint16_t*>(dst), n, uint16_t(value)); break;
    case DType::u8: fill_int_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<uint8_t*>(dst), n, uint8_t(value)); break;
    default:
      TESSERA_DEVICE_FLOAT_SWITCH(t, T, fill_float_kernel<T><<<grid_for(n), kThreads, 0, s>>>(
          static_cast<T*>(dst), n, static_cast<float>(value)));
  }
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void convert(DType src_t, const void* src, DType dst_t, void* dst, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(src_t, S, TESSERA_DEVICE_FLOAT_SWITCH(dst_t, D,
      convert_kernel<S, D><<<grid_for(n), kThreads, 0, s>>>(static_cast<const S*>(src), n, static_cast<D*>(dst))));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void sum_of_squares(DType t, const void* x, int64_t n, double* total, cudaStream_t s, double* partials) {
  if (n == 0) return;
  const unsigned blocks = std::min(grid_for(n), 132u * 4);
  static_assert(132 * 4 <= kReductionPartials, "sum_of_squares: more blocks than partials");
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, sum_of_squares_kernel<T><<<blocks, kThreads, 0, s>>>(
      static_cast<const T*>(x), n, total, partials));
  TESSERA_KERNEL_LAUNCH_CHECK();
  if (partials) add_partials_in_order(partials, blocks, total, s);
}

void adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2, cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads, 0, s>>>(param, grad, exp_avg, exp_avg_sq, n, lr, beta1, beta2, eps,
                                                 weight_decay, bias_correction1, bias_correction2);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
