#include "tessera/data/gpt_dataset.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/data/gpt_dataset_cache.h"

namespace tessera::data {

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> data, Split split, int64_t num_samples,
                       const GPTDatasetConfig& config)
    : data_(std::move(data)), split_(split), config_(config) {
  TESSERA_CHECK(data_ != nullptr, "GPTDataset needs an indexed dataset");
  if (config_.seq_length <= 0) TESSERA_CONFIG_FAIL("model.seq_length = ", config_.seq_length, ": must be positive");
  const auto weights = parse_split(config_.split);
  const auto bookends = split_bookends(weights);
  const auto& bookend = bookends[static_cast<size_t>(split)];
  if (!bookend)
    TESSERA_CONFIG_FAIL("data.split = \"", config_.split, "\" gives the ", split_name(split),
                        " split zero weight, so there is no ", split_name(split), " dataset for ", data_->path_prefix());
  std::tie(first_sequence_, end_sequence_) = split_range(*bookend, data_->sequence_count());
  if (end_sequence_ <= first_sequence_)
    TESSERA_CONFIG_FAIL(data_->path_prefix(), ": the ", split_name(split), " split of data.split = \"", config_.split,
                        "\" holds no sequence of the ", data_->sequence_count(),
                        " (round(fraction * count) is empty); use more data or a larger ", split_name(split), " weight");

  nlohmann::ordered_json desc;
  desc["class"] = "GPTDataset";
  desc["dataset_path"] = data_->path_prefix();
  desc["num_samples"] = num_samples >= 0 ? nlohmann::ordered_json(num_samples) : nlohmann::ordered_json(nullptr);
  desc["index_split"] = split_name(split);
  desc["random_seed"] = config_.seed;
  desc["sequence_length"] = config_.seq_length;
  desc["split"] = config_.split;
  nlohmann::ordered_json matrix = nlohmann::ordered_json::array();
  for (const auto& b : bookends)
    matrix.push_back(b ? nlohmann::ordered_json::array({b->first, b->second}) : nlohmann::ordered_json(nullptr));
  desc["split_matrix"] = matrix;
  desc["add_extra_token_to_sequence"] = true;
  desc["sequence_count"] = data_->sequence_count();
  desc["token_count"] = data_->total_tokens();
  desc["index_format"] = "tessera GPT indices 1";
  description_ = desc.dump(4);

  std::unique_ptr<GPTIndexCache> cache;
  if (config_.use_cache) {
    std::string dir = config_.cache_dir.empty()
                          ? (std::filesystem::path(data_->path_prefix()) / "cache" / "GPTDataset_indices").string()
                          : config_.cache_dir;
    cache = std::make_unique<GPTIndexCache>(dir, description_, split_name(split));
    cache_stem_ = cache->stem();
    if (auto cached = cache->load()) {
      indices_ = std::move(*cached);
      loaded_from_cache_ = true;
      return;
    }
  }
  std::vector<int32_t> lengths(static_cast<size_t>(data_->sequence_count()));
  for (int64_t i = 0; i < data_->sequence_count(); ++i) lengths[static_cast<size_t>(i)] = data_->sequence_length(i);
  std::vector<int32_t> documents(static_cast<size_t>(end_sequence_ - first_sequence_));
  std::iota(documents.begin(), documents.end(), static_cast<int32_t>(first_sequence_));
  indices_ = build_gpt_indices(lengths, documents, num_samples, config_.seq_length, config_.seed);
  if (cache && !cache->save(indices_)) cache_stem_.clear();
}

void GPTDataset::sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const {
  const int64_t s = config_.seq_length;
  TESSERA_CHECK(static_cast<int64_t>(tokens.size()) == s + 1 && static_cast<int64_t>(loss_mask.size()) == s,
                "GPTDataset::sample needs ", s + 1, " tokens and ", s, " mask values, got ", tokens.size(), " and ",
                loss_mask.size());
  TESSERA_CHECK(index >= 0, "sample index ", index, " is negative");
  const int64_t j = indices_.shuffle_index[static_cast<size_t>(index % num_samples())];
  const int64_t begin_position = indices_.sample_index[2 * static_cast<size_t>(j)];
  const int64_t begin_offset = indices_.sample_index[2 * static_cast<size_t>(j) + 1];
  const int64_t end_position = indices_.sample_index[2 * static_cast<size_t>(j) + 2];
  const int64_t end_offset = indices_.sample_index[2 * static_cast<size_t>(j) + 3];
  int64_t written = 0;
  for (int64_t p = begin_position; p <= end_position; ++p) {
    const int64_t sequence = indices_.document_index[static_cast<size_t>(p)];
    const int64_t offset = p == begin_position ? begin_offset : 0;
    const int64_t stop = p == end_position ? end_offset + 1 : data_->sequence_length(sequence);
    const int64_t count = stop - offset;
    TESSERA_CHECK(written + count <= s + 1, "sample ", index, " overruns seq_length + 1 tokens");
    data_->read(sequence, offset, count, tokens.data() + written);
    written += count;
  }
  TESSERA_CHECK(written == s + 1, "sample ", index, " has ", written, " tokens, expected ", s + 1);
  std::fill(loss_mask.begin(), loss_mask.end(), 1.0f);
}

}  // namespace tessera::data
