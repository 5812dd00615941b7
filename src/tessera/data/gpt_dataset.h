// GPTDataset: fixed-length samples (seq_length + 1 ids) cut from one split of an indexed dataset
// through Megatron's document/sample/shuffle indices, cached next to the data between runs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/data/gpt_dataset_indices.h"
#include "tessera/data/gpt_dataset_split.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/sample_source.h"

namespace tessera::data {

struct GPTDatasetConfig {
  int64_t seq_length = 0;
  uint32_t seed = 1234;             // [training] seed, as Megatron's --seed
  std::string split = "969,30,1";   // [data] split
  // Where the index cache lives: "" = Megatron's default <path_prefix>/cache/GPTDataset_indices
  // (a folder named after the prefix, next to the data); else this folder (--data-cache-path).
  std::string cache_dir;
  bool use_cache = true;            // false: always build in memory, write nothing
};

class GPTDataset : public SampleSource {
 public:
  // num_samples < 0: one epoch (Megatron's num_samples=None). ConfigError if the split is empty.
  GPTDataset(std::shared_ptr<const IndexedDataset> data, Split split, int64_t num_samples,
             const GPTDatasetConfig& config);

  int64_t num_samples() const override { return indices_.num_samples(); }
  int64_t seq_length() const override { return config_.seq_length; }
  // Sample index % num_samples(), through the shuffle index; loss_mask is all ones.
  void sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const override;

  const GPTIndices& indices() const { return indices_; }
  Split split() const { return split_; }
  int64_t first_sequence() const { return first_sequence_; }  // the split's sequences [first, end)
  int64_t end_sequence() const { return end_sequence_; }
  bool loaded_from_cache() const { return loaded_from_cache_; }
  const std::string& cache_stem() const { return cache_stem_; }  // "" without caching
  // The JSON description hashed into the cache file names (Megatron's description.txt).
  const std::string& description() const { return description_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  Split split_;
  GPTDatasetConfig config_;
  int64_t first_sequence_ = 0, end_sequence_ = 0;
  GPTIndices indices_;
  bool loaded_from_cache_ = false;
  std::string cache_stem_;
  std::string description_;
};

}  // namespace tessera::data
