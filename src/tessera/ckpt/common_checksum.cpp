#include "tessera/ckpt/common_checksum.h"

#include <cstring>

#include "tessera/ckpt/h5_file.h"

namespace tessera::ckpt {

uint64_t common_fields_checksum(int64_t header_iteration, const ShardCoordinates& layout,
                                const TrainingProgress& progress, bool has_optimizer, const OptimizerState& scalars) {
  int64_t loss_scale_bits = 0;
  std::memcpy(&loss_scale_bits, &scalars.loss_scale, sizeof loss_scale_bits);
  const int64_t fields[] = {header_iteration,
                            layout.tp_size,
                            layout.pp_size,
                            layout.ep_size,
                            layout.dp_size,
                            layout.world_size,
                            progress.iteration,
                            progress.consumed_samples,
                            progress.eval_consumed_samples,
                            progress.skipped_iterations,
                            progress.nan_iterations,
                            progress.seed,
                            has_optimizer ? 1 : 0,
                            has_optimizer ? scalars.step : 0,
                            has_optimizer ? loss_scale_bits : 0,
                            has_optimizer ? scalars.growth_tracker : 0,
                            has_optimizer ? scalars.hysteresis : 0,
                            has_optimizer && scalars.distributed ? 1 : 0};
  return data_checksum(fields, sizeof fields);
}

}  // namespace tessera::ckpt
