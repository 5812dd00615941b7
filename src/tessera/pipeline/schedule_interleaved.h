// The interleaved 1F1B schedule (Megatron forward_backward_pipelining_with_interleaving): V model
// chunks per stage, virtual micro-batch k runs chunk table[k].chunk forward and chunk
// V-1-table[k].chunk backward, with the micro-batch-group table of Megatron.
#pragma once
#include "tessera/pipeline/schedule_step.h"

namespace tessera::parallel {

struct VirtualMicroBatch {
  int64_t micro_batch;
  int chunk;
};

// Megatron's table: for each group of `group_size` micro-batches (the last may be smaller), for each
// chunk, every micro-batch of the group. Size num_micro_batches * num_chunks.
std::vector<VirtualMicroBatch> interleaved_table(int64_t num_micro_batches, int num_chunks, int64_t group_size);

// Megatron's constraint: pp <= group_size <= m and (m % group_size == 0 or m % group_size >= pp).
// Throws ConfigError naming training.global_batch_size (m = global / (micro * dp)) otherwise.
void check_interleaved_micro_batches(int pp, int64_t num_micro_batches, int64_t group_size);

// Warm-up forwards of stage `rank`: min(m V, 2 (pp - rank - 1) + (V - 1) group_size); all when forward_only.
int64_t interleaved_warmup(int pp, int rank, int num_chunks, int64_t num_micro_batches, int64_t group_size,
                           bool forward_only);

// group_size <= 0: pp (Megatron's default).
StageSchedule build_interleaved_schedule(int pp, int rank, int num_chunks, int64_t num_micro_batches,
                                         bool forward_only, int64_t group_size = 0);

}  // namespace tessera::parallel
