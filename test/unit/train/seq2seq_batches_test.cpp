// The trainer's T5 micro-batches (train/seq2seq_batches.h): Megatron's sampler order over DP ranks,
// the MicroBatch fields T5 reads with their shapes, a loss denominator over the decoder's loss mask,
// and a clear error when the samples' lengths differ from the model's.
#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/data/mock_t5_dataset.h"
#include "tessera/train/seq2seq_batches.h"

namespace tessera {
namespace {

TEST(Seq2SeqBatches, SamplerOrderShapesAndDenominator) {
  const int64_t s = 32, sd = 16, b = 2, micro = 3, dp = 2;
  data::MockT5Dataset source(s, sd, 128, 1000, 7, 16);
  for (int64_t rank = 0; rank < dp; ++rank) {
    train::Seq2SeqBatches batches;
    batches.load(source, 40, micro, b, s, sd, dp, rank);
    for (int64_t m = 0; m < micro; ++m) {
      const models::MicroBatch batch = batches.micro_batch(m);
      EXPECT_EQ(batch.tokens.shape(), (Shape{b, s}));
      EXPECT_EQ(batch.padding_mask.shape(), (Shape{b, s}));
      EXPECT_EQ(batch.decoder_tokens.shape(), (Shape{b, sd}));
      EXPECT_EQ(batch.labels.shape(), (Shape{b, sd}));
      EXPECT_EQ(batch.loss_mask.shape(), (Shape{b, sd}));
      EXPECT_EQ(batch.decoder_padding_mask.shape(), (Shape{b, sd}));
      EXPECT_EQ(batch.tokens.dtype(), DType::i32);
      EXPECT_EQ(batch.padding_mask.dtype(), DType::u8);
      EXPECT_EQ(batch.loss_mask.dtype(), DType::f32);
      double mask_sum = 0;
      for (int64_t j = 0; j < b; ++j) {
        // Megatron's sampler: step_start + (m x dp + rank) x b + j.
        std::vector<int32_t> t(s), dt(sd), l(sd);
        std::vector<float> lm(sd);
        std::vector<uint8_t> p(s), dpm(sd);
        data::Seq2SeqSample expected{t, dt, l, lm, p, dpm};
        source.seq2seq_sample(40 + (m * dp + rank) * b + j, expected);
        const auto* tokens = static_cast<const int32_t*>(batch.tokens.data()) + j * s;
        const auto* decoder = static_cast<const int32_t*>(batch.decoder_tokens.data()) + j * sd;
        const auto* labels = static_cast<const int32_t*>(batch.labels.data()) + j * sd;
        const auto* mask = static_cast<const float*>(batch.loss_mask.data()) + j * sd;
        EXPECT_TRUE(std::equal(t.begin(), t.end(), tokens)) << rank << " " << m << " " << j;
        EXPECT_TRUE(std::equal(dt.begin(), dt.end(), decoder));
        EXPECT_TRUE(std::equal(l.begin(), l.end(), labels));
        for (int64_t k = 0; k < sd; ++k) mask_sum += mask[k];
      }
      const models::LossInputs inputs = batches.loss_inputs(m);
      EXPECT_EQ(inputs.batch, b);
      EXPECT_EQ(inputs.seq, sd);
      double sum = 0;
      for (float v : inputs.loss_mask) sum += v;
      EXPECT_EQ(sum, mask_sum);
      EXPECT_GT(sum, 0);
    }
  }
}

TEST(Seq2SeqBatches, LengthMismatchIsAConfigError) {
  data::MockT5Dataset source(32, 16, 128, 100, 7, 16);
  train::Seq2SeqBatches batches;
  EXPECT_THROW(batches.load(source, 0, 1, 1, 32, 20, 1, 0), ConfigError);
  EXPECT_THROW(batches.load(source, 0, 1, 1, 64, 16, 1, 0), ConfigError);
}

}  // namespace
}  // namespace tessera
