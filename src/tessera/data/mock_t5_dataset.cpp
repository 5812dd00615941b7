#include "tessera/data/mock_t5_dataset.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/data/t5_span_corruption.h"

namespace tessera::data {

MockT5Dataset::MockT5Dataset(int64_t seq_length, int64_t decoder_seq_length, int64_t vocab_size, int64_t num_samples,
                             uint64_t seed, int64_t vocab_extra_ids, double mask_prob)
    : seq_length_(seq_length),
      decoder_seq_length_(decoder_seq_length),
      vocab_size_(vocab_size),
      num_samples_(num_samples),
      seed_(seed),
      mask_prob_(mask_prob) {
  if (seq_length < 8) TESSERA_CONFIG_FAIL("model.seq_length = ", seq_length, ": T5 mock data needs at least 8");
  if (decoder_seq_length < 4)
    TESSERA_CONFIG_FAIL("model.decoder_seq_length = ", decoder_seq_length, ": T5 mock data needs at least 4");
  if (vocab_size < 16 || vocab_size > INT32_MAX)
    TESSERA_CONFIG_FAIL("data.vocab_size = ", vocab_size, ": T5 mock data needs a vocabulary of 16 to 2^31-1 ids");
  if (num_samples <= 0) TESSERA_CONFIG_FAIL("mock dataset needs a positive sample count, got ", num_samples);
  if (vocab_extra_ids < 1) TESSERA_CONFIG_FAIL("data.vocab_extra_ids = ", vocab_extra_ids, ": T5 needs sentinels");
  const int64_t count = std::min(vocab_extra_ids, (vocab_size - kFirstRegular) / 2);
  for (int64_t k = 0; k < count; ++k) sentinels_.push_back(static_cast<int32_t>(vocab_size - 1 - k));
}

void MockT5Dataset::sample(int64_t, std::span<int32_t>, std::span<float>) const {
  TESSERA_FAIL("MockT5Dataset holds encoder-decoder samples: read them with seq2seq_sample");
}

void MockT5Dataset::seq2seq_sample(int64_t index, Seq2SeqSample& out) const {
  TESSERA_CHECK(out.tokens.size() == static_cast<size_t>(seq_length_) &&
                    out.decoder_tokens.size() == static_cast<size_t>(decoder_seq_length_),
                "MockT5Dataset: a sample needs ", seq_length_, " encoder and ", decoder_seq_length_, " decoder entries");
  TESSERA_CHECK(index >= 0, "sample index ", index, " is negative");
  const uint64_t i = static_cast<uint64_t>(index % num_samples_);
  Draws draws{RandomStream(seed_, stream_id("mock_t5_data") ^ (i * 0x9E3779B97F4A7C15ull)), 0};
  const int64_t max_real = seq_length_ - 2;  // Megatron's T5 target: encoder_seq_length - 2
  const int64_t n = max_real - static_cast<int64_t>(draws.below(static_cast<uint64_t>(max_real / 4 + 1)));
  const int64_t regular_ids = vocab_size_ - kFirstRegular - static_cast<int64_t>(sentinels_.size());
  const uint64_t regular = static_cast<uint64_t>(std::min<int64_t>(regular_ids, kPeriod));
  const uint64_t start = draws.below(regular), stride = 1 + draws.below(3);
  std::vector<int32_t> text(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    text[static_cast<size_t>(j)] = kFirstRegular + static_cast<int32_t>((start + static_cast<uint64_t>(j) * stride) % regular);
  SpanCorruptionOptions options;
  options.mask_prob = mask_prob_;
  options.max_predictions = std::max<int64_t>(1, static_cast<int64_t>(mask_prob_ * static_cast<double>(max_real)));
  options.max_spans = static_cast<int64_t>(sentinels_.size());
  options.max_decoder_tokens = decoder_seq_length_;
  const std::vector<uint8_t> candidate(static_cast<size_t>(n), uint8_t{1});
  const auto spans = choose_t5_spans(candidate, options, draws);
  write_t5_sample(text, spans, T5SpecialIds{kPad, kBos, kEos, sentinels_}, out);
}

}  // namespace tessera::data
