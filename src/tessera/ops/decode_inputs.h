// The next greedy decode step's inputs, written where the step reads them, from this step's choice:
// a captured decode step that feeds the next one itself (tessera-generate's run-ahead,
// generate/generator.cpp), so the host can launch steps before it has read their tokens.
// With p = past[0] (the cached-token count this step attended over; its token sits at cache index p):
// for every row b, ids[b] = next[b], positions[b] += 1 and key_mask[b, p + 1] = 1 (when p + 1 <
// capacity); then past[0] = p + 1. That is what the host's batch bookkeeping does for the next step.
// next, ids, positions: i32 [rows]; past: i32 [1]; key_mask: u8 [rows, capacity]; all on one device
// (CPU: the reference; CUDA: kernels/decode_inputs.cu).
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

void advance_decode_inputs(const Tensor& next, const Tensor& past, const Tensor& key_mask, const Tensor& ids,
                           const Tensor& positions);

#ifdef TESSERA_HAVE_CUDA
namespace cuda {  // ops/cuda/decode_inputs_cuda.cpp
void advance_decode_inputs(const Tensor& next, const Tensor& past, const Tensor& key_mask, const Tensor& ids,
                           const Tensor& positions);
}  // namespace cuda
#endif

}  // namespace tessera::ops
