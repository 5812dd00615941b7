// Launch declaration of the greedy row reduction (argmax.cu; ops/argmax.h).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels {

void argmax_log_softmax(DType t, const void* logits, int64_t rows, int64_t cols, int64_t valid, int32_t* index,
                        float* logprob, cudaStream_t s);

}  // namespace tessera::kernels
