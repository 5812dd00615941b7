// Launch declaration of the run-ahead decode step's input update (decode_inputs.cu;
// ops/decode_inputs.h has the semantics).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::kernels {

void advance_decode_inputs(const int32_t* next, int32_t* past, uint8_t* key_mask, int64_t rows, int64_t capacity,
                           int32_t* ids, int32_t* positions, cudaStream_t s);

}  // namespace tessera::kernels
