// The 1F1B pipeline schedule (Megatron forward_backward_pipelining_without_interleaving): warm-up
// of min(pp - rank - 1, m) forwards, steady one-forward-one-backward, cool-down backwards.
#pragma once
#include "tessera/pipeline/schedule_step.h"

namespace tessera::parallel {

// forward_only: every micro-batch is a warm-up forward (evaluation).
StageSchedule build_1f1b_schedule(int pp, int rank, int64_t num_micro_batches, bool forward_only);

}  // namespace tessera::parallel
