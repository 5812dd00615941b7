// Where a layer's forward puts what its backward does not read (nn/recompute.h's LayerStack owns the
// arena and resets it after each layer's forward):
//   transient: buffers dead when the forward returns: a linear's output before the residual add, a
//     row-parallel linear's partial sums; null: the caller's arena (they then live until backward).
//   drop_recomputable (selective recomputation): the core attention's probabilities (unfused path)
//     and the MLP's activation output go to `transient` too, and backward computes them again.
#pragma once
#include "tessera/core/buffer.h"

namespace tessera::nn {

struct ForwardScratch {
  Arena* transient = nullptr;
  bool drop_recomputable = false;
  // The arena for a transient buffer: `transient`, or the caller's when there is none.
  Arena& for_transient(Arena& arena) const { return transient ? *transient : arena; }
  // The arena for a recomputable activation: `transient` when it is dropped, else the caller's.
  Arena& for_recomputable(Arena& arena) const { return drop_recomputable ? *transient : arena; }
};

}  // namespace tessera::nn
