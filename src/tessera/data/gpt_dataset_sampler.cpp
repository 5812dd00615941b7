#include "tessera/data/gpt_dataset_sampler.h"

#include "tessera/core/error.h"

namespace tessera::data {

int64_t DataParallelSampler::num_micro_batches() const {
  if (micro_batch_size <= 0 || data_parallel_size <= 0 || global_batch_size <= 0 ||
      global_batch_size % (micro_batch_size * data_parallel_size) != 0)
    TESSERA_CONFIG_FAIL("training.global_batch_size = ", global_batch_size,
                        " must be a positive multiple of micro_batch_size (", micro_batch_size,
                        ") x data-parallel size (", data_parallel_size, ")");
  return global_batch_size / (micro_batch_size * data_parallel_size);
}

std::vector<int64_t> DataParallelSampler::micro_batch_indices(int64_t consumed_samples, int64_t micro_batch,
                                                              int64_t dp_rank) const {
  const int64_t m = num_micro_batches();
  TESSERA_CHECK(micro_batch >= 0 && micro_batch < m, "micro_batch ", micro_batch, " outside [0, ", m, ")");
  TESSERA_CHECK(dp_rank >= 0 && dp_rank < data_parallel_size, "dp_rank ", dp_rank, " outside [0, ",
                data_parallel_size, ")");
  TESSERA_CHECK(consumed_samples >= 0, "consumed_samples is negative");
  std::vector<int64_t> out(static_cast<size_t>(micro_batch_size));
  const int64_t first = consumed_samples + micro_batch * micro_batch_size * data_parallel_size + dp_rank * micro_batch_size;
  for (int64_t k = 0; k < micro_batch_size; ++k) out[static_cast<size_t>(k)] = first + k;
  return out;
}

}  // namespace tessera::data
