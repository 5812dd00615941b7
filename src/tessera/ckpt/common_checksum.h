// A checksum over the scalar fields of common.h5 (iteration, progress counters, seed, optimizer
// scalars, saved layout): HDF5 checksums its metadata only when asked and never raw attribute
// values, so one flipped bit in /progress/iteration would resume at a random iteration. Stored as
// attribute "fields_checksum" of /progress; checked on load when present (older checkpoints lack it).
#pragma once
#include <cstdint>

#include "tessera/ckpt/checkpoint_state.h"

namespace tessera::ckpt {

uint64_t common_fields_checksum(int64_t header_iteration, const ShardCoordinates& layout,
                                const TrainingProgress& progress, bool has_optimizer, const OptimizerState& scalars);

}  // namespace tessera::ckpt
