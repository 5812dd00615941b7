// The kernels' dropout description for a RandomStream: probability, Philox key/stream and the flat
// index of the first element (so the CUDA masks are the CPU masks of ops/dropout.h).
#pragma once
#include <cstdint>

#include "kernels/kernels.h"
#include "tessera/core/rng.h"

namespace tessera::ops::cuda {

inline kernels::DropoutArgs dropout_args(const RandomStream& rng, double p, uint64_t offset) {
  kernels::DropoutArgs d;
  d.p = p;
  d.seed = rng.seed();
  d.stream = rng.stream();
  d.offset = offset;
  return d;
}

}  // namespace tessera::ops::cuda
