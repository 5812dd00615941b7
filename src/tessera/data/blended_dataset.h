// BlendedDataset: samples drawn from several SampleSources in proportion to weights, through
// Megatron's deterministic greedy error-minimising blending index (helpers.cpp build_blending_indices).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/data/sample_source.h"

namespace tessera::data {

// Weights divided by their sum; ConfigError if any is negative or all are zero.
std::vector<double> normalize_weights(const std::vector<double>& weights);

// For i in [0, size): d = argmax_d (w_d * max(i, 1) - count_d) (first maximum wins),
// dataset_index[i] = d, dataset_sample_index[i] = count_d, count_d += 1.
void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

class BlendedDataset : public SampleSource {
 public:
  // weights: normalised or not. ConfigError if a dataset would be asked for more samples than it
  // has (Megatron raises too), or the datasets disagree on seq_length.
  BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> datasets, std::vector<double> weights, int64_t size);

  int64_t num_samples() const override { return static_cast<int64_t>(dataset_index_.size()); }
  int64_t seq_length() const override { return datasets_.front()->seq_length(); }
  void sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const override;

  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }
  const std::vector<double>& weights() const { return weights_; }

 private:
  std::vector<std::shared_ptr<const SampleSource>> datasets_;
  std::vector<double> weights_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace tessera::data
