// A host vector's values as a tensor in an arena, on the arena's device: the inputs that a model
// prepares on the host for a micro-batch (token ids, positions, labels, masks).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/elementwise.h"

namespace tessera::ops {

// host's values (shape's element count of them) as a new tensor of `shape` in the arena.
template <typename T>
Tensor upload(Arena& arena, std::vector<T>& host, Shape shape) {
  Tensor staged(host.data(), dtype_of<T>(), std::move(shape), Device::cpu());
  Tensor out = arena.allocate(dtype_of<T>(), staged.shape());
  copy(staged, out);
  return out;
}

// The same, one-dimensional.
template <typename T>
Tensor upload(Arena& arena, std::vector<T>& host) {
  return upload(arena, host, {static_cast<int64_t>(host.size())});
}

}  // namespace tessera::ops
