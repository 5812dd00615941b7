// Embedding lookup and its gradient (scatter-add). ids: i32[n]; table: [V, h]; out: [n, h].
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

// out[i, :] = table[ids[i], :]. An id outside [0, V) is an error naming the id and position.
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
// dtable[ids[i], :] += dout[i, :]   (accumulates into dtable)
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);

}  // namespace tessera::ops
