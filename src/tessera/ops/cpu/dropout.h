// CPU reference of counter-based dropout: element i is kept iff
// stream.uniform_of_quarter(index_offset + i) >= p (one Philox evaluation gives the decisions of four
// consecutive indices) and kept values are scaled by 1/(1-p). Forward and backward apply the same
// mask, drawn again.
#pragma once
#include <cstdint>

#include "tessera/core/rng.h"

namespace tessera::ops::cpu {

// The keep rule shared by dropout and attention-probability dropout.
inline bool dropout_keeps(const RandomStream& stream, uint64_t index, double p) {
  return static_cast<double>(stream.uniform_of_quarter(index)) >= p;
}

// out[i] = keep(i) ? in[i] / (1 - p) : 0, with p in [0, 1); used for both forward and backward
// (backward passes dout as in and din as out). in and out may alias.
template <typename T>
void dropout_apply(const T* in, int64_t n, double p, const RandomStream& stream, uint64_t index_offset, T* out);

}  // namespace tessera::ops::cpu
