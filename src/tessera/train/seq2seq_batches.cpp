#include "tessera/train/seq2seq_batches.h"

#include "tessera/core/error.h"

namespace tessera::train {

void Seq2SeqBatches::load(const data::SampleSource& source, int64_t step_start, int64_t num_micro_batches,
                          int64_t micro_batch_size, int64_t seq_length, int64_t decoder_seq_length, int64_t dp_size,
                          int64_t dp_rank) {
  TESSERA_CHECK(source.seq2seq(), "Seq2SeqBatches: the source holds no encoder-decoder samples");
  if (source.seq_length() != seq_length || source.decoder_seq_length() != decoder_seq_length)
    TESSERA_CONFIG_FAIL("the T5 samples are ", source.seq_length(), " encoder / ", source.decoder_seq_length(),
                        " decoder tokens but model.seq_length = ", seq_length, " and model.decoder_seq_length = ",
                        decoder_seq_length);
  b_ = micro_batch_size, s_ = seq_length, sd_ = decoder_seq_length;
  const size_t n = static_cast<size_t>(num_micro_batches * b_ * s_), nd = static_cast<size_t>(num_micro_batches * b_ * sd_);
  tokens_.resize(n);
  padding_.resize(n);
  decoder_tokens_.resize(nd);
  labels_.resize(nd);
  loss_mask_.resize(nd);
  decoder_padding_.resize(nd);
  const size_t us = static_cast<size_t>(s_), usd = static_cast<size_t>(sd_);
  for (int64_t m = 0; m < num_micro_batches; ++m) {
    const int64_t first = step_start + (m * dp_size + dp_rank) * b_;  // Megatron's sampler
    for (int64_t j = 0; j < b_; ++j) {
      const size_t at = static_cast<size_t>((m * b_ + j) * s_), atd = static_cast<size_t>((m * b_ + j) * sd_);
      data::Seq2SeqSample sample{std::span<int32_t>(tokens_.data() + at, us),
                                 std::span<int32_t>(decoder_tokens_.data() + atd, usd),
                                 std::span<int32_t>(labels_.data() + atd, usd),
                                 std::span<float>(loss_mask_.data() + atd, usd),
                                 std::span<uint8_t>(padding_.data() + at, us),
                                 std::span<uint8_t>(decoder_padding_.data() + atd, usd)};
      source.seq2seq_sample(first + j, sample);
    }
  }
}

models::MicroBatch Seq2SeqBatches::micro_batch(int64_t m) {
  models::MicroBatch batch;
  batch.tokens = Tensor(tokens_.data() + m * b_ * s_, DType::i32, {b_, s_});
  batch.padding_mask = Tensor(padding_.data() + m * b_ * s_, DType::u8, {b_, s_});
  batch.decoder_tokens = Tensor(decoder_tokens_.data() + m * b_ * sd_, DType::i32, {b_, sd_});
  batch.labels = Tensor(labels_.data() + m * b_ * sd_, DType::i32, {b_, sd_});
  batch.loss_mask = Tensor(loss_mask_.data() + m * b_ * sd_, DType::f32, {b_, sd_});
  batch.decoder_padding_mask = Tensor(decoder_padding_.data() + m * b_ * sd_, DType::u8, {b_, sd_});
  return batch;
}

models::LossInputs Seq2SeqBatches::loss_inputs(int64_t m) const {
  const size_t n = static_cast<size_t>(b_ * sd_);
  return {b_, sd_, {}, std::span<const float>(loss_mask_.data() + static_cast<size_t>(m) * n, n)};
}

}  // namespace tessera::train
