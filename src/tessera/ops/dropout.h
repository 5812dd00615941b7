// Dropout driven by the counter-based RNG: element i is kept iff stream.uniform_of_quarter(index_offset + i) >= p,
// and kept values are scaled by 1/(1-p). The mask is never stored: backward draws it again.
#pragma once
#include <cstdint>

#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

void dropout_forward(const Tensor& in, double p, const RandomStream& stream, uint64_t index_offset,
                     const Tensor& out);
void dropout_backward(const Tensor& dout, double p, const RandomStream& stream, uint64_t index_offset,
                      const Tensor& din);

}  // namespace tessera::ops
