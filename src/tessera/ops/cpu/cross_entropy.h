// CPU reference of cross entropy over the first valid_vocab columns of logits [n, vocab] (float, double);
// columns >= valid_vocab are vocabulary padding: they never reach the loss and get zero gradient.
#pragma once
#include <cstdint>

namespace tessera::ops::cpu {

// losses[i] = lse_i - logits[i, target_i], lse_i = log sum_{j < valid_vocab} exp(logits[i, j]) (max
// subtracted). A target outside [0, valid_vocab) fails naming the target and its position.
template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t vocab, int64_t valid_vocab,
                           T* losses, T* log_sum_exp);
// dlogits[i, j] = dlosses[i] * (exp(logits[i, j] - lse_i) - [j == target_i]) for j < valid_vocab, else 0.
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* log_sum_exp, const T* dlosses,
                            int64_t n, int64_t vocab, int64_t valid_vocab, T* dlogits);

}  // namespace tessera::ops::cpu
