// Megatron's check_for_nan_in_loss: a NaN or infinite training loss ends the run with an error
// instead of skipping every step (a NaN loss is not an fp16 overflow, which shows in the
// gradients with a finite loss, and it does not recover). The loss is the same on every rank
// (averaged over DP, sent from the last pipeline stage), so every rank stops together.
#pragma once
#include <cstdint>

namespace tessera::train {

void check_loss_is_finite(double loss, int64_t iteration, int world_rank);

}  // namespace tessera::train
