// Builds the train/valid/test SampleSources of a GPT run from data_path (prefixes, optionally
// weighted) as Megatron's BlendedMegatronDatasetBuilder: one prefix -> GPTDatasets of its splits;
// several -> one GPTDataset per prefix and split, blended by weight.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/gpt_dataset.h"
#include "tessera/data/sample_source.h"

namespace tessera::data {

struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // empty: no weights (blend by dataset size, one epoch each)
};

// data_path as Megatron's --data-path: ["a", "b"] (prefixes only) or ["0.3", "a", "0.7", "b"]
// (weight, prefix pairs). ConfigError naming data.data_path for anything else.
DataBlend parse_data_path(const std::vector<std::string>& items);

// Samples requested per split (Megatron training.py): train = train_iters * gbs,
// valid = (train_iters / eval_interval + 1) * eval_iters * gbs, test = eval_iters * gbs.
std::array<int64_t, 3> requested_sample_counts(int64_t train_iters, int64_t global_batch_size,
                                               int64_t eval_interval, int64_t eval_iters);

struct GPTDatasetSplits {
  std::shared_ptr<const SampleSource> train, valid, test;  // null where the split has zero weight
  const SampleSource* get(Split split) const;
};

// num_samples[i] per split; a split whose weight in config.split is 0 stays null. With weights,
// each prefix's dataset is asked for ceil(ceil(n * w) * 1.005) samples and the blend has
// sum_d ceil(n * w_d) samples. Without weights and several prefixes every dataset is built for
// one epoch and blended in proportion to its size.
GPTDatasetSplits build_gpt_datasets(const DataBlend& blend, const GPTDatasetConfig& config,
                                    const std::array<int64_t, 3>& num_samples);

}  // namespace tessera::data
