// The attributes at the root of every checkpoint shard file (model, optimizer and common files of
// docs/checkpoint-format.md): format and versions, the iteration, the writing rank's coordinates,
// the parameters' dtype and whether the optimizer state is distributed. The trainer's save and
// tessera-convert's writer both write them here.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>

#include "tessera/ckpt/checkpoint_state.h"

namespace tessera::ckpt {

inline constexpr int64_t kShardFormatVersion = 1;

void write_shard_header(hid_t file, int64_t iteration, const ShardCoordinates& coords, const std::string& params_dtype,
                        bool distributed_optimizer);

}  // namespace tessera::ckpt
