// Cross entropy over the first valid_vocab columns of logits [n, V] (columns >= valid_vocab are
// vocabulary padding and never reach the loss). losses[i] = logsumexp(logits[i]) - logits[i, target[i]]
// for every token (the caller applies the loss mask and the mean); log_sum_exp [n] is saved.
// targets: i32[n]; losses, log_sum_exp: same float dtype as logits.
#pragma once
#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera::ops {

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t valid_vocab, const Tensor& losses,
                           const Tensor& log_sum_exp);
// dlogits[i, j] = dlosses[i] * (softmax_ij - [j == target_i]); padded columns get 0. Overwrites dlogits.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& log_sum_exp,
                            const Tensor& dlosses, int64_t valid_vocab, const Tensor& dlogits);
// Both at once, when dlosses is known before the losses (a training step's output-layer chunk):
// the forward's losses and log_sum_exp, then dlogits (may be logits). On a GPU one kernel reads
// each bf16 / f16 row once and writes its gradient once (rows up to 102,400 columns); otherwise,
// and on the CPU, the forward then the backward.
void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                                    int64_t valid_vocab, const Tensor& losses, const Tensor& log_sum_exp,
                                    const Tensor& dlogits);

}  // namespace tessera::ops
