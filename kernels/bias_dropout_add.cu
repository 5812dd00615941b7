// Megatron's fused bias + dropout + residual add: out = residual + dropout(x + bias[col]) with the
// Philox mask of dropout_apply (element i uses counter offset + i). Round-to-nearest intrinsics keep
// the three roundings of the unfused ops (no FMA contraction), so f32 results equal the CPU's.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 256;

template <typename T, bool kDropout>
__global__ void bias_dropout_add_kernel(const T* x, const T* bias, const T* residual, int64_t n, int64_t cols,
                                        DropoutRule rule, T* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = load_f(x + i);
    if (bias) v = __fadd_rn(v, load_f(bias + i % cols));
    if (kDropout) v = rule.keeps(static_cast<uint64_t>(i)) ? __fmul_rn(v, rule.keep_scale) : 0.0f;
    store_f(out + i, __fadd_rn(load_f(residual + i), v));
  }
}

}  // namespace

void bias_dropout_add(DType t, const void* x, const void* bias, const void* residual, int64_t n, int64_t cols,
                      const DropoutArgs& d, void* out, cudaStream_t s) {
  if (n == 0) return;
  const unsigned blocks =
      static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32)));
  const DropoutRule rule = make_dropout_rule(d);
  TESSERA_DEVICE_FLOAT_SWITCH(t, T,
      if (d.p > 0.0)
        bias_dropout_add_kernel<T, true><<<blocks, kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(bias),
            static_cast<const T*>(residual), n, cols, rule, static_cast<T*>(out));
      else
        bias_dropout_add_kernel<T, false><<<blocks, kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(bias),
            static_cast<const T*>(residual), n, cols, rule, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
