// A source of fixed-length training samples: sample i is seq_length + 1 token ids (inputs are the
// first seq_length, labels the last seq_length). Implemented by the mock dataset and GPTDataset.
// A masked-LM source (BERT: masked_lm() true) fills MaskedLmSample instead.
#pragma once
#include <cstdint>
#include <span>

namespace tessera::data {

// One BERT sample (seq_length entries per span): [CLS] A [SEP] B [SEP] then padding; labels hold
// the original ids at the masked positions (loss_mask 1) and the input id elsewhere; token types
// 0 for [CLS] A [SEP], 1 for B [SEP]; padding_mask 1 for real tokens; is_random 1 when A and B were
// swapped (sentence order).
struct MaskedLmSample {
  std::span<int32_t> tokens, labels, token_types;
  std::span<float> loss_mask;
  std::span<uint8_t> padding_mask;
  int32_t is_random = 0;
};

// One T5 sample: encoder tokens and padding_mask (encoder_seq_length entries: the span-corrupted
// text, sentinels in place of the spans, [SEP]/EOS, then padding), decoder_tokens (decoder_seq_length:
// the start token, then labels shifted right), labels (the sentinels and the spans they replace, EOS,
// then padding), loss_mask (1 on real labels) and decoder_padding_mask (1 on real decoder tokens).
struct Seq2SeqSample {
  std::span<int32_t> tokens, decoder_tokens, labels;
  std::span<float> loss_mask;
  std::span<uint8_t> padding_mask, decoder_padding_mask;
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t num_samples() const = 0;  // distinct samples before wrapping around
  virtual int64_t seq_length() const = 0;
  // Fills tokens (seq_length + 1 ids) with sample `index` (any index >= 0; wraps if needed) and
  // loss_mask (seq_length values, 1 = counts in the loss).
  virtual void sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const = 0;
  // Masked-LM sources: true, and masked_lm_sample() fills sample `index` (sample() is not used).
  virtual bool masked_lm() const { return false; }
  virtual void masked_lm_sample(int64_t /*index*/, MaskedLmSample& /*out*/) const {}
  // Encoder-decoder sources (T5: seq2seq() true): seq2seq_sample() fills sample `index`;
  // seq_length() is the encoder's length, decoder_seq_length() the decoder's.
  virtual bool seq2seq() const { return false; }
  virtual int64_t decoder_seq_length() const { return 0; }
  virtual void seq2seq_sample(int64_t /*index*/, Seq2SeqSample& /*out*/) const {}
};

}  // namespace tessera::data
