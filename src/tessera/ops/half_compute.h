// bf16 / f16 storage with f32 compute for the CPU reference ops: the dispatchers hand bf16/f16
// tensors to compute_in_f32, which converts them to f32, runs the f32 op and converts the outputs back.
#pragma once
#include <functional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops::detail {

bool is_half(DType dtype);  // bf16 or f16

// Runs fn on `tensors` with every bf16/f16 tensor replaced by an f32 copy (undefined and non-float
// tensors pass through unchanged); afterwards the f32 values of the tensors flagged in is_output
// are rounded back into them. Outputs are copied in first, so accumulating (+=) outputs work.
void compute_in_f32(const std::vector<Tensor>& tensors, const std::vector<bool>& is_output,
                    const std::function<void(const std::vector<Tensor>&)>& fn);

}  // namespace tessera::ops::detail
