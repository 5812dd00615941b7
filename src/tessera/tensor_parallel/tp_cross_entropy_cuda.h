// CUDA implementation of the vocabulary-parallel cross entropy (see tp_cross_entropy.h for the
// semantics); device logits, f32 or logits-dtype losses / lse / dlosses. CUDA builds only.
#pragma once
#include "tessera/core/tensor.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::parallel {

void vocab_parallel_cross_entropy_forward_cuda(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                               int64_t valid_vocab, const TensorParallel& tp, const Tensor& losses,
                                               const Tensor& log_sum_exp);
void vocab_parallel_cross_entropy_backward_cuda(const Tensor& logits, const Tensor& targets, const Tensor& log_sum_exp,
                                                const Tensor& dlosses, int64_t vocab_start, int64_t valid_vocab,
                                                const Tensor& dlogits);

}  // namespace tessera::parallel
