#include "tessera/tensor_parallel/tp_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/half_compute.h"
#include "tessera/tensor_parallel/tp_cross_entropy_cuda.h"

namespace tessera::parallel {

namespace {

// Columns [0, local_valid) of this rank are real vocabulary.
int64_t local_valid_columns(int64_t local_vocab, int64_t vocab_start, int64_t valid_vocab) {
  return std::clamp<int64_t>(valid_vocab - vocab_start, 0, local_vocab);
}

void check_targets(const Tensor& targets, int64_t valid_vocab, const char* op) {
  const int32_t* t = targets.data_as<int32_t>();
  for (int64_t i = 0; i < targets.numel(); ++i)
    if (t[i] < 0 || t[i] >= valid_vocab)
      TESSERA_FAIL(op, ": target ", t[i], " at position ", i, " is outside the valid vocabulary [0, ", valid_vocab,
                   ")");
}

template <typename T>
void forward_t(const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t valid_vocab,
               const TensorParallel& tp, const Tensor& losses, const Tensor& log_sum_exp) {
  int64_t n = logits.dim(0), vocab = logits.dim(1);
  int64_t valid = local_valid_columns(vocab, vocab_start, valid_vocab);
  const T* z = logits.data_as<T>();
  const int32_t* target = targets.data_as<int32_t>();
  Buffer max_buffer(static_cast<size_t>(n) * sizeof(T)), sums_buffer(static_cast<size_t>(2 * n) * sizeof(T));
  Tensor row_max = max_buffer.as_tensor(dtype_of<T>(), {n});
  Tensor sums = sums_buffer.as_tensor(dtype_of<T>(), {2 * n});  // [target logit - max, sum exp] per row
  T* m = row_max.data_as<T>();
  for (int64_t i = 0; i < n; ++i) {
    T best = -std::numeric_limits<T>::infinity();
    for (int64_t v = 0; v < valid; ++v) best = std::max(best, z[i * vocab + v]);
    m[i] = best;
  }
  tp.comm->all_reduce(row_max, ReduceOp::max);
  T* s = sums.data_as<T>();
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int64_t v = 0; v < valid; ++v) sum += std::exp(static_cast<double>(z[i * vocab + v] - m[i]));
    int64_t local_target = static_cast<int64_t>(target[i]) - vocab_start;
    s[2 * i] = local_target >= 0 && local_target < valid ? z[i * vocab + local_target] - m[i] : T(0);
    s[2 * i + 1] = static_cast<T>(sum);
  }
  tp.comm->all_reduce(sums, ReduceOp::sum);
  T* loss = losses.data_as<T>();
  T* lse = log_sum_exp.data_as<T>();
  for (int64_t i = 0; i < n; ++i) {
    T log_sum = static_cast<T>(std::log(static_cast<double>(s[2 * i + 1])));
    lse[i] = m[i] + log_sum;
    loss[i] = log_sum - s[2 * i];
  }
}

template <typename T>
void backward_t(const Tensor& logits, const Tensor& targets, const Tensor& log_sum_exp, const Tensor& dlosses,
                int64_t vocab_start, int64_t valid_vocab, const Tensor& dlogits) {
  int64_t n = logits.dim(0), vocab = logits.dim(1);
  int64_t valid = local_valid_columns(vocab, vocab_start, valid_vocab);
  const T* z = logits.data_as<T>();
  const T* lse = log_sum_exp.data_as<T>();
  const T* dl = dlosses.data_as<T>();
  const int32_t* target = targets.data_as<int32_t>();
  T* g = dlogits.data_as<T>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t v = 0; v < valid; ++v)
      g[i * vocab + v] = static_cast<T>(dl[i] * std::exp(static_cast<double>(z[i * vocab + v] - lse[i])));
    for (int64_t v = valid; v < vocab; ++v) g[i * vocab + v] = T(0);
    int64_t local_target = static_cast<int64_t>(target[i]) - vocab_start;
    if (local_target >= 0 && local_target < valid) g[i * vocab + local_target] -= dl[i];
  }
}

void check_args(const Tensor& logits, const Tensor& targets, const Tensor& per_row, const char* op) {
  TESSERA_CHECK(logits.ndim() == 2 && logits.device().is_cpu(), op, ": logits must be host [n, V/tp], got ",
                logits.describe());
  expect_tensor(targets, DType::i32, {logits.dim(0)}, "targets");
  expect_tensor(per_row, logits.dtype(), {logits.dim(0)}, "per-row tensor");
}

}  // namespace

void vocab_parallel_cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                          int64_t valid_vocab, const TensorParallel& tp, const Tensor& losses,
                                          const Tensor& log_sum_exp) {
  if (!tp.enabled()) {
    ops::cross_entropy_forward(logits, targets, valid_vocab, losses, log_sum_exp);
    return;
  }
#ifdef TESSERA_HAVE_CUDA
  if (logits.device().is_cuda())
    return vocab_parallel_cross_entropy_forward_cuda(logits, targets, vocab_start, valid_vocab, tp, losses, log_sum_exp);
#endif
  check_args(logits, targets, losses, "vocab_parallel_cross_entropy_forward");
  check_targets(targets, valid_vocab, "vocab_parallel_cross_entropy_forward");
  if (logits.dtype() == DType::f32) forward_t<float>(logits, targets, vocab_start, valid_vocab, tp, losses, log_sum_exp);
  else if (ops::detail::is_half(logits.dtype()))  // bf16 / f16 storage, f32 compute and f32 all-reduces
    ops::detail::compute_in_f32({logits, losses, log_sum_exp}, {false, true, true},
                                [&](const std::vector<Tensor>& t) {
                                  forward_t<float>(t[0], targets, vocab_start, valid_vocab, tp, t[1], t[2]);
                                });
  else TESSERA_FAIL("vocab_parallel_cross_entropy_forward: unsupported logits ", logits.describe(),
                    " (allowed: f32, bf16, f16)");
}

void vocab_parallel_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& log_sum_exp,
                                           const Tensor& dlosses, int64_t vocab_start, int64_t valid_vocab,
                                           const TensorParallel& tp, const Tensor& dlogits) {
  if (!tp.enabled()) {
    ops::cross_entropy_backward(logits, targets, log_sum_exp, dlosses, valid_vocab, dlogits);
    return;
  }
#ifdef TESSERA_HAVE_CUDA
  if (logits.device().is_cuda())
    return vocab_parallel_cross_entropy_backward_cuda(logits, targets, log_sum_exp, dlosses, vocab_start, valid_vocab,
                                                      dlogits);
#endif
  check_args(logits, targets, dlosses, "vocab_parallel_cross_entropy_backward");
  expect_same_shape(logits, dlogits, "vocab_parallel_cross_entropy_backward dlogits");
  if (logits.dtype() == DType::f32)
    backward_t<float>(logits, targets, log_sum_exp, dlosses, vocab_start, valid_vocab, dlogits);
  else if (ops::detail::is_half(logits.dtype()))  // bf16 / f16 storage, f32 compute
    ops::detail::compute_in_f32({logits, log_sum_exp, dlosses, dlogits}, {false, false, false, true},
                                [&](const std::vector<Tensor>& t) {
                                  backward_t<float>(t[0], targets, t[1], t[2], vocab_start, valid_vocab, t[3]);
                                });
  else TESSERA_FAIL("vocab_parallel_cross_entropy_backward: unsupported logits ", logits.describe(),
                    " (allowed: f32, bf16, f16)");
}

void vocab_parallel_cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                                                   int64_t vocab_start, int64_t valid_vocab, const TensorParallel& tp,
                                                   const Tensor& losses, const Tensor& log_sum_exp,
                                                   const Tensor& dlogits) {
  if (!tp.enabled()) {
    ops::cross_entropy_forward_backward(logits, targets, dlosses, valid_vocab, losses, log_sum_exp, dlogits);
    return;
  }
  vocab_parallel_cross_entropy_forward(logits, targets, vocab_start, valid_vocab, tp, losses, log_sum_exp);
  vocab_parallel_cross_entropy_backward(logits, targets, log_sum_exp, dlosses, vocab_start, valid_vocab, tp, dlogits);
}

}  // namespace tessera::parallel
