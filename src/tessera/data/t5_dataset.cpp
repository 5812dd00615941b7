#include "tessera/data/t5_dataset.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/data/t5_span_corruption.h"

namespace tessera::data {

T5Dataset::T5Dataset(std::shared_ptr<const IndexedDataset> data, int64_t first_document, int64_t end_document,
                     T5DatasetConfig config, const std::string& name)
    : data_(std::move(data)), config_(std::move(config)) {
  const int64_t max_len = config_.seq_length - 2;  // Megatron's T5: encoder_seq_length - 2
  if (max_len < 2) TESSERA_CONFIG_FAIL("model.seq_length = ", config_.seq_length, " is too short for T5 (>= 4)");
  if (config_.decoder_seq_length < 4)
    TESSERA_CONFIG_FAIL("model.decoder_seq_length = ", config_.decoder_seq_length, " is too short for T5 (>= 4)");
  if (config_.sentinels.empty())
    TESSERA_CONFIG_FAIL(name, ": T5 needs sentinel tokens; set data.vocab_extra_ids (usually 100)");
  SentenceSampleMapOptions options;
  options.max_length = max_len;
  options.short_seq_prob = config_.short_seq_prob;
  options.min_sentences = 1;
  options.num_samples = config_.num_samples;
  options.max_sentence_tokens = kMaxSentenceTokens;
  options.seed = config_.seed;
  options.stream = stream_id("t5_sample_map");
  map_ = build_sentence_sample_map(*data_, first_document, end_document, options, name);
}

void T5Dataset::sample(int64_t, std::span<int32_t>, std::span<float>) const {
  TESSERA_FAIL("T5Dataset holds encoder-decoder samples: read them with seq2seq_sample");
}

void T5Dataset::seq2seq_sample(int64_t index, Seq2SeqSample& out) const {
  TESSERA_CHECK(out.tokens.size() == static_cast<size_t>(config_.seq_length) &&
                    out.decoder_tokens.size() == static_cast<size_t>(config_.decoder_seq_length),
                "T5Dataset: a sample needs ", config_.seq_length, " encoder and ", config_.decoder_seq_length,
                " decoder entries");
  TESSERA_CHECK(index >= 0, "sample index ", index, " is negative");
  const uint64_t i = static_cast<uint64_t>(index % num_samples());
  const SentenceSpan& e = map_[i];
  Draws draws{RandomStream(config_.seed, stream_id("t5_sample") ^ (i * 0x9E3779B97F4A7C15ull)), 0};
  std::vector<int32_t> text;
  for (int64_t k = e.first_sentence; k < e.end_sentence && static_cast<int64_t>(text.size()) < e.target; ++k) {
    const int64_t n = data_->sequence_length(k);
    const size_t at = text.size();
    text.resize(at + static_cast<size_t>(n));
    data_->read(k, 0, n, text.data() + at);
  }
  if (static_cast<int64_t>(text.size()) > e.target) text.resize(static_cast<size_t>(e.target));  // Megatron truncates the end
  std::vector<uint8_t> candidate(text.size());
  for (size_t k = 0; k < text.size(); ++k) {
    const int32_t id = text[k];
    const bool continues = id >= 0 && static_cast<size_t>(id) < config_.continuation.size() &&
                           config_.continuation[static_cast<size_t>(id)];
    candidate[k] = continues ? 2 : 1;
  }
  SpanCorruptionOptions options;
  options.mask_prob = config_.mask_prob;
  options.max_predictions = std::max<int64_t>(1, static_cast<int64_t>(config_.mask_prob * static_cast<double>(e.target)));
  options.max_spans = static_cast<int64_t>(config_.sentinels.size());
  options.max_decoder_tokens = config_.decoder_seq_length;
  const auto spans = choose_t5_spans(candidate, options, draws);
  write_t5_sample(text, spans, T5SpecialIds{config_.pad, config_.bos, config_.eos, config_.sentinels}, out);
}

}  // namespace tessera::data
