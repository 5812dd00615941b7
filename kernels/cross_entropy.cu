// Cross entropy fused with the softmax over the first valid_vocab columns (the rest is vocabulary
// padding): one block per token row, fp32 max/sum reductions; backward writes softmax - onehot.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 512;

template <typename T, typename L>
__global__ void cross_entropy_forward_kernel(const T* logits, const int32_t* targets, int64_t vocab,
                                             int64_t valid_vocab, L* losses, L* log_sum_exp) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid_vocab; j += blockDim.x) m = fmaxf(m, load_f(x + j));
  m = block_reduce<true>(m);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < valid_vocab; j += blockDim.x) sum += __expf(load_f(x + j) - m);
  sum = block_reduce<false>(sum);
  if (threadIdx.x == 0) {
    const float lse = m + logf(sum);
    const int32_t target = targets[row];
    store_f(log_sum_exp + row, lse);
    store_f(losses + row, target >= 0 && target < valid_vocab ? lse - load_f(x + target) : NAN);
  }
}

template <typename T, typename L>
__global__ void cross_entropy_backward_kernel(const T* logits, const int32_t* targets, const L* log_sum_exp,
                                              const L* dlosses, int64_t vocab, int64_t valid_vocab, T* dlogits) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  T* dx = dlogits + row * vocab;
  const float lse = load_f(log_sum_exp + row), dl = load_f(dlosses + row);
  const int32_t target = targets[row];
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float g = j < valid_vocab ? dl * (__expf(load_f(x + j) - lse) - (j == target ? 1.0f : 0.0f)) : 0.0f;
    store_f(dx + j, g);
  }
}

}  // namespace

void cross_entropy_forward(DType t, const void* logits, const int32_t* targets, int64_t n, int64_t vocab,
                           int64_t valid_vocab, DType loss_t, void* losses, void* log_sum_exp, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(loss_t, L,
      cross_entropy_forward_kernel<T, L><<<static_cast<unsigned>(n), kThreads, 0, s>>>(
          static_cast<const T*>(logits), targets, vocab, valid_vocab, static_cast<L*>(losses),
          static_cast<L*>(log_sum_exp))));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void cross_entropy_backward(DType t, const void* logits, const int32_t* targets, DType loss_t, const void* log_sum_exp,
                            const void* dlosses, int64_t n, int64_t vocab, int64_t valid_vocab, void* dlogits,
                            cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(loss_t, L,
      cross_entropy_backward_kernel<T, L><<<static_cast<unsigned>(n), kThreads, 0, s>>>(
          static_cast<const T*>(logits), targets, static_cast<const L*>(log_sum_exp), static_cast<const L*>(dlosses),
          vocab, valid_vocab, static_cast<T*>(dlogits))));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
