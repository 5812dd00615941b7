// The bulk-copy path of the fused decode linear (decode_linear_bulk.cu), called by decode_linear.cu's
// decode_linear_forward for arguments it has checked (decode_linear_applies).
#pragma once
#include <cuda_runtime.h>

#include "kernels/decode_linear.h"
#include "tessera/core/dtype.h"

namespace tessera::kernels {

// Whether the bulk path takes these arguments (DecodeLinearArgs::bulk_blocks_per_sm > 0, sm_90, the
// block's share resident bulk_blocks_per_sm times on one SM).
bool decode_linear_bulk_plans(DType t, const DecodeLinearArgs& a);
// Launches the bulk path and returns true where it takes the arguments; false (nothing launched)
// otherwise.
bool decode_linear_bulk_forward(DType t, const DecodeLinearArgs& a, cudaStream_t s);

}  // namespace tessera::kernels
