// A synchronous copy between host and device memory of two tensors of one dtype and shape, for
// packages below ops (the checkpoint format library): ordered on the compute stream, done on return.
#pragma once
#include "tessera/core/tensor.h"

namespace tessera {

void copy_synchronous(const Tensor& src, const Tensor& dst);

}  // namespace tessera
