// Which global sample indices a data-parallel rank reads, as Megatron's MegatronPretrainingSampler:
// from consumed_samples on, chunks of micro_batch_size * dp_size; DP rank r takes [r*b, (r+1)*b).
// The index depends on the DP rank only, so every TP (and PP, CP) rank of one DP replica reads
// the same batch.
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::data {

struct DataParallelSampler {
  int64_t micro_batch_size = 1;
  int64_t data_parallel_size = 1;
  int64_t global_batch_size = 1;  // = micro_batch_size * num_micro_batches * data_parallel_size

  int64_t num_micro_batches() const;  // ConfigError if global_batch_size is not a multiple
  // Samples consumed before `iteration` (0-based count of completed iterations), constant batch.
  int64_t consumed_samples(int64_t iteration) const { return iteration * global_batch_size; }
  // The micro_batch_size global sample indices of micro-batch `micro_batch` (0-based within the
  // step) on `dp_rank`, for a step that starts after `consumed_samples` samples.
  std::vector<int64_t> micro_batch_indices(int64_t consumed_samples, int64_t micro_batch, int64_t dp_rank) const;
  // The same, by iteration number.
  std::vector<int64_t> iteration_indices(int64_t iteration, int64_t micro_batch, int64_t dp_rank) const {
    return micro_batch_indices(consumed_samples(iteration), micro_batch, dp_rank);
  }
};

}  // namespace tessera::data
