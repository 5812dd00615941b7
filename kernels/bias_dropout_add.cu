// Megatron's fused bias + dropout + residual add: out = residual + dropout(x + bias[col]) with the
// Philox mask of dropout_apply (element i uses counter offset + i). Round-to-nearest intrinsics keep
// the three roundings of the unfused ops (no FMA contraction), so f32 results equal the CPU's. Aligned
// tensors go 16 bytes at a time (vec16.cuh).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/vec16.cuh"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 256;

template <typename T, bool kDropout>
__device__ __forceinline__ float bias_dropout_add_value(float x, float bias, float residual, uint64_t i,
                                                        const DropoutRule& rule, bool has_bias) {
  float v = x;
  if (has_bias) v = __fadd_rn(v, bias);
  if (kDropout) v = rule.keeps(i) ? __fmul_rn(v, rule.keep_scale) : 0.0f;
  return __fadd_rn(residual, v);
}

template <typename T, bool kDropout>
__global__ void bias_dropout_add_kernel(const T* x, const T* bias, const T* residual, int64_t n, int64_t cols,
                                        DropoutRule rule, T* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f(out + i, bias_dropout_add_value<T, kDropout>(load_f(x + i), bias ? load_f(bias + i % cols) : 0.0f,
                                                         load_f(residual + i), static_cast<uint64_t>(i), rule,
                                                         bias != nullptr));
}

// The same on 16-byte packs (cols a multiple of the pack).
template <typename T, bool kDropout>
__global__ void bias_dropout_add_vec_kernel(const T* x, const T* bias, const T* residual, int64_t packs,
                                            int64_t col_packs, DropoutRule rule, T* out) {
  constexpr int kN = kVec16<T>;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(gridDim.x) * blockDim.x) {
    float xv[kN], rv[kN], bv[kN];
    load_pack(x, p, xv);
    load_pack(residual, p, rv);
    if (bias) load_pack(bias, p % col_packs, bv);
#pragma unroll
    for (int k = 0; k < kN; ++k)
      xv[k] = bias_dropout_add_value<T, kDropout>(xv[k], bias ? bv[k] : 0.0f, rv[k],
                                                  static_cast<uint64_t>(p * kN + k), rule, bias != nullptr);
    store_pack(out, p, xv);
  }
}

}  // namespace

void bias_dropout_add(DType t, const void* x, const void* bias, const void* residual, int64_t n, int64_t cols,
                      const DropoutArgs& d, void* out, cudaStream_t s) {
  if (n == 0) return;
  const unsigned blocks =
      static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32)));
  const DropoutRule rule = make_dropout_rule(d);
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, {
    const T* xt = static_cast<const T*>(x);
    const T* bt = static_cast<const T*>(bias);
    const T* rt = static_cast<const T*>(residual);
    T* ot = static_cast<T*>(out);
    if (vec16_fits<T>(n, bias ? cols : 0, {x, bias, residual, out})) {
      const int64_t packs = n / kVec16<T>, col_packs = bias ? cols / kVec16<T> : 1;
      const unsigned vec_blocks =
          static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((packs + kThreads - 1) / kThreads, 132 * 32)));
      if (d.p > 0.0)
        bias_dropout_add_vec_kernel<T, true><<<vec_blocks, kThreads, 0, s>>>(xt, bt, rt, packs, col_packs, rule, ot);
      else
        bias_dropout_add_vec_kernel<T, false><<<vec_blocks, kThreads, 0, s>>>(xt, bt, rt, packs, col_packs, rule, ot);
    } else if (d.p > 0.0) {
      bias_dropout_add_kernel<T, true><<<blocks, kThreads, 0, s>>>(xt, bt, rt, n, cols, rule, ot);
    } else {
      bias_dropout_add_kernel<T, false><<<blocks, kThreads, 0, s>>>(xt, bt, rt, n, cols, rule, ot);
    }
  });
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
