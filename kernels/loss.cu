// Loss kernels beside the fused cross entropy: the masked loss sum of a micro-batch, and the pieces of
// Megatron's vocabulary-parallel cross entropy (each TP rank holds a slice of the vocabulary
// columns; row maxima and [target logit - max, sum exp] are all-reduced between the kernels).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/det_partials.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kRowThreads = 512;

template <typename L>
__global__ void masked_sum_kernel(const L* values, const L* mask, int64_t n, double* total, double* partials) {
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const float m = load_f(mask + i);
    if (m != 0.0f) acc += m * load_f(values + i);  // masked-out NaN / Inf losses do not count
  }
  acc = block_reduce<false>(acc);
  if (threadIdx.x == 0) {
    if (partials) partials[blockIdx.x] = static_cast<double>(acc);  // deterministic mode
    else atomicAdd(total, static_cast<double>(acc));
  }
}

template <typename T>
__global__ void vocab_parallel_max_kernel(const T* logits, int64_t vocab, int64_t valid, float* row_max) {
  const T* x = logits + blockIdx.x * vocab;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, load_f(x + j));
  m = block_reduce<true>(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <typename T>
__global__ void vocab_parallel_sums_kernel(const T* logits, const int32_t* targets, int64_t vocab, int64_t valid,
                                           int64_t vocab_start, const float* row_max, float* sums) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  const float m = row_max[row];
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) sum += __expf(load_f(x + j) - m);
  sum = block_reduce<false>(sum);
  if (threadIdx.x == 0) {
    const int64_t local = static_cast<int64_t>(targets[row]) - vocab_start;
    sums[2 * row] = local >= 0 && local < valid ? load_f(x + local) - m : 0.0f;
    sums[2 * row + 1] = sum;
  }
}

template <typename L>
__global__ void vocab_parallel_finish_kernel(const float* row_max, const float* sums, int64_t n, L* losses,
                                             L* log_sum_exp) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= n) return;
  const float log_sum = logf(sums[2 * row + 1]);
  store_f(log_sum_exp + row, row_max[row] + log_sum);
  store_f(losses + row, log_sum - sums[2 * row]);
}

template <typename T, typename L>
__global__ void vocab_parallel_backward_kernel(const T* logits, const int32_t* targets, const L* log_sum_exp,
                                               const L* dlosses, int64_t vocab, int64_t valid, int64_t vocab_start,
                                               T* dlogits) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  T* dx = dlogits + row * vocab;
  const float lse = load_f(log_sum_exp + row), dl = load_f(dlosses + row);
  const int64_t local = static_cast<int64_t>(targets[row]) - vocab_start;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float g = j < valid ? dl * (__expf(load_f(x + j) - lse) - (j == local ? 1.0f : 0.0f)) : 0.0f;
    store_f(dx + j, g);
  }
}

}  // namespace

void masked_sum(DType t, const void* values, const void* mask, int64_t n, double* total, cudaStream_t s,
                double* partials) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 264));
  static_assert(264 <= kReductionPartials, "masked_sum: more blocks than partials");
  TESSERA_DEVICE_FLOAT_SWITCH(t, L, masked_sum_kernel<L><<<blocks, 256, 0, s>>>(
      static_cast<const L*>(values), static_cast<const L*>(mask), n, total, partials));
  TESSERA_KERNEL_LAUNCH_CHECK();
  if (partials) add_partials_in_order(partials, blocks, total, s);
}

void vocab_parallel_row_max(DType t, const void* logits, int64_t n, int64_t vocab, int64_t valid, float* row_max,
                            cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, vocab_parallel_max_kernel<T><<<static_cast<unsigned>(n), kRowThreads, 0, s>>>(
      static_cast<const T*>(logits), vocab, valid, row_max));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void vocab_parallel_sums(DType t, const void* logits, const int32_t* targets, int64_t n, int64_t vocab, int64_t valid,
                         int64_t vocab_start, const float* row_max, float* sums, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, vocab_parallel_sums_kernel<T><<<static_cast<unsigned>(n), kRowThreads, 0, s>>>(
      static_cast<const T*>(logits), targets, vocab, valid, vocab_start, row_max, sums));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void vocab_parallel_finish(const float* row_max, const float* sums, int64_t n, DType loss_t, void* losses,
                           void* log_sum_exp, cudaStream_t s) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  TESSERA_DEVICE_FLOAT_SWITCH(loss_t, L, vocab_parallel_finish_kernel<L><<<blocks, 256, 0, s>>>(
      row_max, sums, n, static_cast<L*>(losses), static_cast<L*>(log_sum_exp)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void vocab_parallel_backward(DType t, const void* logits, const int32_t* targets, DType loss_t,
                             const void* log_sum_exp, const void* dlosses, int64_t n, int64_t vocab, int64_t valid,
                             int64_t vocab_start, void* dlogits, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(loss_t, L,
      vocab_parallel_backward_kernel<T, L><<<static_cast<unsigned>(n), kRowThreads, 0, s>>>(
          static_cast<const T*>(logits), targets, static_cast<const L*>(log_sum_exp), static_cast<const L*>(dlosses),
          vocab, valid, vocab_start, static_cast<T*>(dlogits))));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
