// Vocab-parallel cross entropy (Megatron's tensor_parallel/cross_entropy.py): each TP rank holds
// the logits of its vocabulary columns [vocab_start, vocab_start + V/tp); the row max is
// all-reduced (max), then the target logit and the sum of exps are all-reduced (sum, one
// collective). Columns >= valid_vocab (vocabulary padding) never reach the loss and get zero
// gradient. With TP = 1 this is ops::cross_entropy_*.
#pragma once
#include "tessera/core/tensor.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::parallel {

// logits: [n, V/tp] (f32 or f64; f32 when TP > 1); targets: i32 [n] global ids in [0, valid_vocab).
// losses[i] = logsumexp_v(logits[i]) - logits[i, target]; log_sum_exp [n] is saved for backward.
void vocab_parallel_cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                          int64_t valid_vocab, const TensorParallel& tp, const Tensor& losses,
                                          const Tensor& log_sum_exp);
// dlogits (overwritten) = dlosses[i] * (softmax - onehot(target)) on this rank's columns.
void vocab_parallel_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& log_sum_exp,
                                           const Tensor& dlosses, int64_t vocab_start, int64_t valid_vocab,
                                           const TensorParallel& tp, const Tensor& dlogits);
// Forward then backward where dlosses is known first (a training step's output-layer chunk);
// with TP = 1 ops::cross_entropy_forward_backward (one pass over the logits on a GPU).
void vocab_parallel_cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                                                   int64_t vocab_start, int64_t valid_vocab, const TensorParallel& tp,
                                                   const Tensor& losses, const Tensor& log_sum_exp,
                                                   const Tensor& dlogits);

}  // namespace tessera::parallel
