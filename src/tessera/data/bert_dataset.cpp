#include "tessera/data/bert_dataset.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/data/bert_masking.h"
#include "tessera/data/sentence_sample_map.h"

namespace tessera::data {

BertDataset::BertDataset(std::shared_ptr<const IndexedDataset> data, int64_t first_document, int64_t end_document,
                         BertDatasetConfig config, const std::string& name)
    : data_(std::move(data)), config_(std::move(config)) {
  const int64_t max_len = config_.seq_length - 3;  // [CLS] + 2 x [SEP]
  if (max_len < 2) TESSERA_CONFIG_FAIL("model.seq_length = ", config_.seq_length, " is too short for BERT (>= 5)");
  TESSERA_CHECK(first_document >= 0 && end_document <= data_->document_count() && first_document <= end_document,
                "BERT dataset document range [", first_document, ", ", end_document, ") outside ", name);
  SentenceSampleMapOptions options;
  options.max_length = max_len;
  options.short_seq_prob = config_.short_seq_prob;
  options.min_sentences = 2;  // a sentence pair (sentence order)
  options.num_samples = config_.num_samples;
  options.max_sentence_tokens = kMaxSentenceTokens;
  options.seed = config_.seed;
  options.stream = stream_id("bert_sample_map");
  map_ = build_sentence_sample_map(*data_, first_document, end_document, options, name);
}

void BertDataset::sample(int64_t, std::span<int32_t>, std::span<float>) const {
  TESSERA_FAIL("BertDataset holds masked-LM samples: read them with masked_lm_sample");
}

void BertDataset::masked_lm_sample(int64_t index, MaskedLmSample& out) const {
  const size_t s = static_cast<size_t>(config_.seq_length);
  TESSERA_CHECK(out.tokens.size() == s && out.labels.size() == s && out.token_types.size() == s &&
                    out.loss_mask.size() == s && out.padding_mask.size() == s,
                "BertDataset: every span of a sample needs ", s, " entries");
  TESSERA_CHECK(index >= 0, "sample index ", index, " is negative");
  const uint64_t i = static_cast<uint64_t>(index % num_samples());
  const Entry& e = map_[i];
  Draws draws{RandomStream(config_.seed, stream_id("bert_sample") ^ (i * 0x9E3779B97F4A7C15ull)), 0};
  const int64_t sentences = e.end_sentence - e.first_sentence;
  const int64_t a_end = e.first_sentence + 1 + static_cast<int64_t>(draws.below(static_cast<uint64_t>(sentences - 1)));
  auto read = [&](int64_t first, int64_t end) {
    std::vector<int32_t> ids;
    for (int64_t k = first; k < end; ++k) {
      const int64_t n = data_->sequence_length(k);
      const size_t at = ids.size();
      ids.resize(at + static_cast<size_t>(n));
      data_->read(k, 0, n, ids.data() + at);
    }
    return ids;
  };
  std::vector<int32_t> a = read(e.first_sentence, a_end), b = read(a_end, e.end_sentence);
  out.is_random = static_cast<int32_t>(draws.below(2));
  if (out.is_random) std::swap(a, b);
  // Megatron's truncate_segments: trim the longer one from a random end.
  while (static_cast<int64_t>(a.size() + b.size()) > e.target) {
    std::vector<int32_t>& longer = a.size() > b.size() ? a : b;
    if (draws.uniform() < 0.5) longer.erase(longer.begin());
    else longer.pop_back();
  }
  std::fill(out.tokens.begin(), out.tokens.end(), config_.pad);
  std::fill(out.token_types.begin(), out.token_types.end(), 0);
  std::fill(out.loss_mask.begin(), out.loss_mask.end(), 0.0f);
  std::fill(out.padding_mask.begin(), out.padding_mask.end(), uint8_t{0});
  std::vector<uint8_t> candidate(s, 0);
  size_t at = 0;
  auto piece = [&](int32_t id) -> uint8_t {
    const bool continues = id >= 0 && static_cast<size_t>(id) < config_.continuation.size() && config_.continuation[static_cast<size_t>(id)];
    return continues ? 2 : 1;
  };
  out.tokens[at++] = config_.cls;
  for (int32_t t : a) candidate[at] = piece(t), out.tokens[at++] = t;
  out.tokens[at++] = config_.sep;
  for (int32_t t : b) candidate[at] = piece(t), out.token_types[at] = 1, out.tokens[at++] = t;
  out.token_types[at] = 1;
  out.tokens[at++] = config_.sep;
  std::fill(out.padding_mask.begin(), out.padding_mask.begin() + static_cast<std::ptrdiff_t>(at), uint8_t{1});
  std::copy(out.tokens.begin(), out.tokens.end(), out.labels.begin());
  MaskingOptions options;
  options.mask_prob = config_.mask_prob;
  options.mask_id = config_.mask;
  options.vocab_size = config_.vocab_size;
  options.max_predictions = std::max<int64_t>(1, std::llround(config_.mask_prob * static_cast<double>(e.target)));
  mask_tokens(out.tokens.subspan(0, at), std::span<const uint8_t>(candidate.data(), at), options, draws, out.labels,
              out.loss_mask);
}

}  // namespace tessera::data
