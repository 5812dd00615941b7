#include "tessera/data/blended_dataset.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::data {

std::vector<double> normalize_weights(const std::vector<double>& weights) {
  double sum = 0.0;
  for (double w : weights) {
    if (!(w >= 0.0)) TESSERA_CONFIG_FAIL("data.data_path: weight ", w, " is not allowed; weights must be >= 0");
    sum += w;
  }
  if (!(sum > 0.0)) TESSERA_CONFIG_FAIL("data.data_path: the weights sum to 0; at least one must be positive");
  std::vector<double> out(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) out[i] = weights[i] / sum;
  return out;
}

void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  TESSERA_CHECK(!weights.empty() && weights.size() <= 32767, "blending needs 1 to 32767 datasets, got ", weights.size());
  dataset_index.assign(static_cast<size_t>(size), 0);
  dataset_sample_index.assign(static_cast<size_t>(size), 0);
  std::vector<int64_t> current(weights.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double at = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - static_cast<double>(current[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * at - static_cast<double>(current[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index[static_cast<size_t>(i)] = static_cast<int16_t>(best);
    dataset_sample_index[static_cast<size_t>(i)] = current[best];
    ++current[best];
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)), weights_(normalize_weights(weights)) {
  TESSERA_CHECK(!datasets_.empty() && datasets_.size() == weights_.size(), "BlendedDataset: ", datasets_.size(),
                " datasets and ", weights_.size(), " weights");
  TESSERA_CHECK(size > 0, "BlendedDataset size must be positive, got ", size);
  for (const auto& d : datasets_)
    if (d->seq_length() != datasets_.front()->seq_length())
      TESSERA_CONFIG_FAIL("blended datasets disagree on seq_length (", d->seq_length(), " vs ",
                          datasets_.front()->seq_length(), ")");
  build_blending_indices(weights_, size, dataset_index_, dataset_sample_index_);
  std::vector<int64_t> needed(datasets_.size(), 0);
  for (size_t i = 0; i < dataset_index_.size(); ++i)
    needed[static_cast<size_t>(dataset_index_[i])] =
        std::max(needed[static_cast<size_t>(dataset_index_[i])], dataset_sample_index_[i] + 1);
  for (size_t d = 0; d < datasets_.size(); ++d)
    if (needed[d] > datasets_[d]->num_samples())
      TESSERA_CONFIG_FAIL("blend: dataset ", d, " would be sampled ", needed[d], " times but has only ",
                          datasets_[d]->num_samples(), " samples (oversampling is not allowed)");
}

void BlendedDataset::sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const {
  TESSERA_CHECK(index >= 0, "sample index ", index, " is negative");
  const size_t i = static_cast<size_t>(index % num_samples());
  datasets_[static_cast<size_t>(dataset_index_[i])]->sample(dataset_sample_index_[i], tokens, loss_mask);
}

}  // namespace tessera::data
