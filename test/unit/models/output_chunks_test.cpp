// GPTModel's chunked output layer (GPTModel::chunk_loss): the logits and the cross entropy a chunk
// of tokens at a time, with the output layer's backward in the same pass when a backward follows,
// give the loss and gradients of the whole-logits path (kept from forward to backward, which runs
// where a loss needs the token losses before its gradient) for any chunk size (one token, an uneven
// split, the whole micro-batch, the automatic rule), for the lm and key-token losses; evaluation
// (no backward) gives the same loss; and the micro-batch keeps no logits.
#include <gtest/gtest.h>

#include <cmath>

#include "models/tiny_gpt.h"
#include "tessera/models/gpt.h"
#include "tessera/models/keytoken_loss.h"
#include "tessera/models/lm_loss.h"

namespace tessera {
namespace {

constexpr int64_t kVocab = 45, kBatch = 3, kSeq = 7, kHidden = 16, kHeads = 2;

// A loss whose gradient GPTModel may not know before the token losses: the whole-logits path.
class LateGradient : public models::TokenLoss {
 public:
  explicit LateGradient(std::shared_ptr<const models::TokenLoss> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  double denominator(const models::LossInputs& in) const override { return inner_->denominator(in); }
  models::LossTerms forward(Arena& arena, const models::LossInputs& in, const Tensor& mask, const Tensor& losses,
                            const Tensor& dlosses) const override {
    return inner_->forward(arena, in, mask, losses, dlosses);
  }

 private:
  std::shared_ptr<const models::TokenLoss> inner_;
};

struct TrainResult {
  double loss_sum = 0;
  std::vector<float> grads;
  size_t kept_bytes = 0;  // the micro-batch arena after forward and loss
};

// Two micro-batches (gradients accumulate), dropout on; chunk_rows 0: the automatic rule.
TrainResult train(std::shared_ptr<const models::TokenLoss> loss, int64_t chunk_rows, bool untied = false) {
  auto config = test::tiny_model_config(2, kHidden, kHeads, kSeq, 0.1);
  config.untie_embeddings_and_output_weights = untied;
  models::GPTModel model(config, kVocab, DType::f32, Device::cpu());
  model.set_loss(std::move(loss));
  model.set_output_chunk_rows(chunk_rows);
  model.initialize(7);
  model.parameters().zero_grads();
  TrainResult run;
  Arena arena(size_t(1) << 20);
  for (int m = 0; m < 2; ++m) {
    auto tokens = test::random_tokens(kBatch, kSeq, kVocab, 11 + static_cast<uint64_t>(m));
    std::vector<float> mask(static_cast<size_t>(kBatch * kSeq), 1.0f);
    mask[3] = mask[10] = 0.0f;
    nn::DropoutContext dropout{3, 50 + static_cast<uint64_t>(m), true};
    models::GPTInputs in = model.prepare(arena, {Tensor(tokens.data(), DType::i32, {kBatch, kSeq + 1}),
                                                 Tensor(mask.data(), DType::f32, {kBatch, kSeq}), Tensor(), Tensor()});
    models::GPTChunkActivations acts;
    const size_t before = arena.used_bytes();
    model.forward_chunk(0, arena, in, Tensor(), Tensor(), dropout, acts);
    const double scale = 0.75 / in.denominator;
    models::LossSum sum = model.chunk_loss(arena, in, acts, scale);
    run.kept_bytes = arena.used_bytes() - before;
    model.backward_chunk(0, arena, in, Tensor(), scale, dropout, acts);
    run.loss_sum += sum.loss_sum.value();
    arena.reset();
  }
  const float* g = model.parameters().all_grads().data_as<float>();
  run.grads.assign(g, g + model.parameters().numel());
  return run;
}

void expect_close(const TrainResult& got, const TrainResult& want, const std::string& what) {
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * std::abs(want.loss_sum)) << what;
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  double max_grad = 0, max_diff = 0;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    max_grad = std::max(max_grad, static_cast<double>(std::abs(want.grads[i])));
    max_diff = std::max(max_diff, static_cast<double>(std::abs(got.grads[i] - want.grads[i])));
  }
  ASSERT_GT(max_grad, 0.0) << what;
  // f32 sums in another order (the output weight's gradient accumulates chunk by chunk).
  EXPECT_LE(max_diff, 1e-5 * max_grad) << what << ": largest gradient difference " << max_diff;
}

TEST(OutputChunks, ChunkedHeadEqualsTheWholeLogits) {
  for (bool untied : {false, true}) {
    const std::string layout = untied ? "untied" : "tied";
    const TrainResult whole = train(std::make_shared<LateGradient>(std::make_shared<models::LmLoss>()), 0, untied);
    for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{5}, kBatch * kSeq, int64_t{1000}})
      expect_close(train(std::make_shared<models::LmLoss>(), rows, untied), whole,
                   layout + " lm, chunk rows " + std::to_string(rows));
  }
}

TEST(OutputChunks, KeytokenLossChunkedEqualsTheWholeLogits) {
  auto keytoken = std::make_shared<models::KeytokenWeightedLoss>(std::vector<int64_t>{3, 8, 20}, 0.5);
  const TrainResult whole = train(std::make_shared<LateGradient>(keytoken), 0);
  const TrainResult chunked = train(keytoken, 4);
  expect_close(chunked, whole, "keytoken, chunk rows 4");
  // Not vacuous: another loss changes the gradients.
  const TrainResult lm = train(std::make_shared<models::LmLoss>(), 4);
  EXPECT_NE(lm.grads, chunked.grads);
}

TEST(OutputChunks, TheMicroBatchKeepsNoLogits) {
  const TrainResult whole = train(std::make_shared<LateGradient>(std::make_shared<models::LmLoss>()), 0);
  const TrainResult chunked = train(std::make_shared<models::LmLoss>(), 4);
  // The whole path keeps the logits [s*b, padded vocab] (f32) and their log-sum-exp; the chunked
  // path the output layer's input gradient [s*b, h] and the scaled token gradients instead (arena
  // allocations are 256-byte aligned).
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t padded_vocab = 48, tokens = kBatch * kSeq, f32 = sizeof(float);
  EXPECT_EQ(whole.kept_bytes - chunked.kept_bytes,
            aligned(tokens * padded_vocab * f32) + aligned(tokens * f32) - aligned(tokens * kHidden * f32) -
                aligned(tokens * f32));
}

TEST(OutputChunks, EvaluationLossEqualsTraining) {
  auto config = test::tiny_model_config(2, kHidden, kHeads, kSeq, 0.0);
  for (int64_t rows : {int64_t{0}, int64_t{2}}) {
    models::GPTModel model(config, kVocab, DType::f32, Device::cpu());
    model.set_output_chunk_rows(rows);
    model.initialize(7);
    auto tokens = test::random_tokens(kBatch, kSeq, kVocab, 11);
    std::vector<float> mask(static_cast<size_t>(kBatch * kSeq), 1.0f);
    Tensor tokens_t(tokens.data(), DType::i32, {kBatch, kSeq + 1}), mask_t(mask.data(), DType::f32, {kBatch, kSeq});
    Arena arena(size_t(1) << 20);
    const double eval = model.forward_loss(arena, tokens_t, mask_t).loss_sum.value();
    arena.reset();
    model.parameters().zero_grads();
    const double trained = model.forward_backward(arena, tokens_t, mask_t, 1.0, nn::DropoutContext{}).loss_sum.value();
    EXPECT_NEAR(eval, trained, 1e-6 * std::abs(trained)) << "chunk rows " << rows;
    EXPECT_GT(eval, 0.0);
  }
}

TEST(OutputChunks, AutomaticChunksFitOneLayersActivations) {
  auto config = test::tiny_model_config(2, kHidden, kHeads, kSeq, 0.0);
  models::GPTModel model(config, kVocab, DType::f32, Device::cpu());
  const int64_t row_bytes = 48 * 4;
  EXPECT_EQ(model.output_chunk_rows(100, 1000 * row_bytes), 100);  // it fits: one chunk
  EXPECT_EQ(model.output_chunk_rows(100, 30 * row_bytes), 25);     // 4 even chunks of at most 30
  EXPECT_EQ(model.output_chunk_rows(100, 10), 1);                  // at least one row
  model.set_output_chunk_rows(7);
  EXPECT_EQ(model.output_chunk_rows(100, 30 * row_bytes), 7);
  EXPECT_EQ(model.output_chunk_rows(5, 30 * row_bytes), 5);
}

}  // namespace
}  // namespace tessera
