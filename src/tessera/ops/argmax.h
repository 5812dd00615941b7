// Greedy decoding's per-row reduction, done where the logits are (no full-vocabulary copy to the
// host): for each row of logits [rows, cols], the index of the largest of the first `valid` columns
// (the first on ties) and its log-softmax over those columns. CPU: f32/f64; CUDA: f32/bf16/f16
// (kernels/argmax.cu). index: i32 [rows], logprob: f32 [rows], on the logits' device.
#pragma once
#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera::ops {

void argmax_log_softmax(const Tensor& logits, int64_t valid, const Tensor& index, const Tensor& logprob);

#ifdef TESSERA_HAVE_CUDA
namespace cuda {  // ops/cuda/argmax_cuda.cpp
void argmax_log_softmax(const Tensor& logits, int64_t valid, const Tensor& index, const Tensor& logprob);
}  // namespace cuda
#endif

}  // namespace tessera::ops
