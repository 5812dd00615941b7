// Where a layer draws its dropout masks from: the run's seed and a key unique to this forward
// pass (iteration and micro-batch), mixed with the layer's own site name. training = false
// disables dropout (evaluation, generation).
#pragma once
#include <string_view>

#include "tessera/core/rng.h"

namespace tessera::nn {

struct DropoutContext {
  uint64_t seed = 0;
  uint64_t pass_key = 0;
  bool training = false;
  RandomStream stream(std::string_view site) const { return RandomStream(seed, mix_stream(stream_id(site), pass_key)); }
};

}  // namespace tessera::nn
