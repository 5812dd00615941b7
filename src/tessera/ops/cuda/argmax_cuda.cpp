// CUDA host side of the greedy row reduction (kernels/argmax.cu); the dispatcher checked shapes.
#include "kernels/argmax.h"
#include "tessera/ops/argmax.h"
#include "tessera/ops/cuda/cuda_context.h"

namespace tessera::ops::cuda {

void argmax_log_softmax(const Tensor& logits, int64_t valid, const Tensor& index, const Tensor& logprob) {
  kernels::argmax_log_softmax(logits.dtype(), logits.data(), logits.dim(0), logits.dim(1), valid,
                              static_cast<int32_t*>(index.data()), static_cast<float*>(logprob.data()),
                              CudaContext::get().stream());
}

}  // namespace tessera::ops::cuda
