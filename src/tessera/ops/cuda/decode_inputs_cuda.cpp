// CUDA host side of the run-ahead decode step's input update (kernels/decode_inputs.cu); the
// dispatcher checked the tensors.
#include "kernels/decode_inputs.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/decode_inputs.h"

namespace tessera::ops::cuda {

void advance_decode_inputs(const Tensor& next, const Tensor& past, const Tensor& key_mask, const Tensor& ids,
                           const Tensor& positions) {
  kernels::advance_decode_inputs(next.data_as<int32_t>(), past.data_as<int32_t>(), key_mask.data_as<uint8_t>(),
                                 key_mask.dim(0), key_mask.dim(1), ids.data_as<int32_t>(), positions.data_as<int32_t>(),
                                 CudaContext::get().stream());
}

}  // namespace tessera::ops::cuda
