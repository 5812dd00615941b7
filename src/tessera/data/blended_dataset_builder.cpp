#include "tessera/data/blended_dataset_builder.h"

#include <cmath>
#include <cstdlib>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/data/blended_dataset.h"

namespace tessera::data {

DataBlend parse_data_path(const std::vector<std::string>& items) {
  if (items.empty()) TESSERA_CONFIG_FAIL("data.data_path is empty; give dataset prefixes, e.g. [\"corpus_text_document\"]");
  DataBlend blend;
  auto as_number = [](const std::string& s, double& out) {
    char* end = nullptr;
    out = std::strtod(s.c_str(), &end);
    return !s.empty() && end == s.c_str() + s.size();
  };
  double first = 0.0;
  if (items.size() % 2 == 0 && as_number(items[0], first)) {
    for (size_t i = 0; i < items.size(); i += 2) {
      double w = 0.0;
      if (!as_number(items[i], w))
        TESSERA_CONFIG_FAIL("data.data_path entry ", i, " (\"", items[i],
                            "\") must be a weight: use [weight, prefix, weight, prefix, ...] or only prefixes");
      blend.weights.push_back(w);
      blend.prefixes.push_back(items[i + 1]);
    }
    blend.weights = normalize_weights(blend.weights);
  } else {
    for (size_t i = 0; i < items.size(); ++i) {
      double unused = 0.0;
      if (as_number(items[i], unused))
        TESSERA_CONFIG_FAIL("data.data_path entry ", i, " (\"", items[i],
                            "\") looks like a weight, but the list is not [weight, prefix, ...] pairs");
      blend.prefixes.push_back(items[i]);
    }
  }
  return blend;
}

std::array<int64_t, 3> requested_sample_counts(int64_t train_iters, int64_t global_batch_size, int64_t eval_interval,
                                               int64_t eval_iters) {
  TESSERA_CHECK(eval_interval > 0, "eval_interval must be positive");
  return {train_iters * global_batch_size, (train_iters / eval_interval + 1) * eval_iters * global_batch_size,
          eval_iters * global_batch_size};
}

const SampleSource* GPTDatasetSplits::get(Split split) const {
  switch (split) {
    case Split::train: return train.get();
    case Split::valid: return valid.get();
    case Split::test: return test.get();
  }
  return nullptr;
}

namespace {
// Training never reads the test split: when data.split leaves it no sequence of some dataset (a
// small corpus with "969,30,1"), it is not built, as Megatron builds no dataset for an empty split.
bool test_split_is_empty(const std::vector<std::shared_ptr<const IndexedDataset>>& data,
                         const std::pair<double, double>& bookend, const std::string& split) {
  for (const auto& d : data) {
    auto [first, end] = split_range(bookend, d->sequence_count());
    if (end <= first) {
      log::warn("WARNING: the test split of data.split = \"", split, "\" holds no sequence of ", d->path_prefix(),
                " (", d->sequence_count(), " sequences); no test dataset is built (training does not use it)");
      return true;
    }
  }
  return false;
}
}  // namespace

GPTDatasetSplits build_gpt_datasets(const DataBlend& blend, const GPTDatasetConfig& config,
                                    const std::array<int64_t, 3>& num_samples) {
  const auto bookends = split_bookends(parse_split(config.split));
  std::vector<std::shared_ptr<const IndexedDataset>> data;
  for (const auto& prefix : blend.prefixes) data.push_back(std::make_shared<IndexedDataset>(prefix));
  std::array<std::shared_ptr<const SampleSource>, 3> out;
  for (int s = 0; s < 3; ++s) {
    if (!bookends[static_cast<size_t>(s)]) continue;
    const Split split = static_cast<Split>(s);
    const int64_t n = num_samples[static_cast<size_t>(s)];
    if (split == Split::test && test_split_is_empty(data, *bookends[static_cast<size_t>(s)], config.split)) continue;
    if (data.size() == 1 && blend.weights.empty()) {
      out[static_cast<size_t>(s)] = std::make_shared<GPTDataset>(data[0], split, n, config);
      continue;
    }
    std::vector<std::shared_ptr<const SampleSource>> parts;
    std::vector<double> weights;
    int64_t size = 0;
    for (size_t d = 0; d < data.size(); ++d) {
      if (blend.weights.empty()) {
        auto part = std::make_shared<GPTDataset>(data[d], split, -1, config);
        weights.push_back(static_cast<double>(part->num_samples()));
        size += part->num_samples();
        parts.push_back(std::move(part));
      } else {
        const double target = std::ceil(static_cast<double>(n) * blend.weights[d]);
        const auto request = static_cast<int64_t>(std::ceil(target * (1.0 + 0.005)));
        parts.push_back(std::make_shared<GPTDataset>(data[d], split, request, config));
        weights.push_back(blend.weights[d]);
        size += static_cast<int64_t>(target);
      }
    }
    out[static_cast<size_t>(s)] = std::make_shared<BlendedDataset>(std::move(parts), std::move(weights), size);
  }
  return {out[0], out[1], out[2]};
}

}  // namespace tessera::data
