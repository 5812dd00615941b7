// BERT (models/bert.h): the whole backward (token-type embedding, bidirectional attention with the
// padding mask, the MLM head, pooler + binary head) against central finite differences of the
// loss in float64; the padding mask hides padded keys; attention is bidirectional; token types
// reach the output; the loss is lm_loss + sop_loss over masked positions only.
#include <gtest/gtest.h>

#include <cmath>

#include "models/tiny_gpt.h"
#include "tessera/models/bert.h"

namespace tessera {
namespace {

constexpr int64_t kVocab = 13, kBatch = 2, kSeq = 6;

train::ModelConfig bert_config() {
  auto config = test::tiny_model_config(2, 16, 4, kSeq, 0.0);
  config.architecture = "bert";
  config.ffn_hidden_size = 24;
  return config;
}

struct BertBatch {
  std::vector<int32_t> tokens, labels, types, sentence;
  std::vector<float> mask;
  std::vector<uint8_t> padding;
  models::MicroBatch view() {
    models::MicroBatch b;
    b.tokens = Tensor(tokens.data(), DType::i32, {kBatch, kSeq});
    b.labels = Tensor(labels.data(), DType::i32, {kBatch, kSeq});
    b.token_types = Tensor(types.data(), DType::i32, {kBatch, kSeq});
    b.loss_mask = Tensor(mask.data(), DType::f32, {kBatch, kSeq});
    b.padding_mask = Tensor(padding.data(), DType::u8, {kBatch, kSeq});
    b.sentence_labels = Tensor(sentence.data(), DType::i32, {kBatch});
    return b;
  }
};

BertBatch sample_batch() {
  BertBatch b;
  b.tokens = {1, 5, 2, 7, 2, 0, /**/ 1, 9, 4, 2, 11, 2};
  b.labels = {1, 5, 8, 7, 2, 0, /**/ 1, 3, 4, 2, 6, 2};
  b.types = {0, 0, 0, 1, 1, 0, /**/ 0, 0, 0, 0, 1, 1};
  b.mask = {0, 1, 1, 0, 0, 0, /**/ 0, 1, 0, 0, 1, 0};
  b.padding = {1, 1, 1, 1, 1, 0, /**/ 1, 1, 1, 1, 1, 1};  // sample 0's last token is padding
  b.sentence = {1, 0};
  return b;
}

void jitter(models::BertModel& model, uint64_t seed) {
  Tensor all = model.parameters().all_values();
  double* values = all.data_as<double>();
  RandomStream stream(seed, seed);
  for (int64_t i = 0; i < all.numel(); ++i) values[i] += 0.3 * stream.normal(static_cast<uint64_t>(i));
}

TEST(BertModel, BackwardMatchesFiniteDifferences) {
  models::BertModel model(bert_config(), kVocab, DType::f64, Device::cpu());
  model.initialize(42);
  jitter(model, 7);
  auto& store = model.parameters();
  for (const char* name : {"embedding.tokentype_embeddings.weight", "lm_head.dense.weight", "lm_head.layer_norm.bias",
                           "output_layer.bias", "pooler.dense.weight", "binary_head.bias",
                           "encoder.layers.1.self_attention.linear_qkv.weight", "encoder.final_layernorm.weight"})
    EXPECT_GE(store.index_of(name), 0) << name;
  BertBatch batch = sample_batch();
  nn::DropoutContext dropout{5, 11, false};
  Arena arena(size_t(1) << 20);
  store.zero_grads();
  const double grad_scale = 0.5;
  models::LossSum first = model.forward_backward(arena, batch.view(), grad_scale, dropout);
  arena.reset();
  EXPECT_EQ(first.denominator, 1.0);
  ASSERT_EQ(first.metric_sums.size(), 3u);
  EXPECT_EQ(first.metric_sums[0].first, "lm_loss");
  EXPECT_EQ(first.metric_sums[1].first, "sop_loss");
  EXPECT_NEAR(first.loss_sum.value(), first.metric_sums[0].second + first.metric_sums[1].second, 1e-12);
  std::vector<double> analytic(store.all_grads().data_as<double>(), store.all_grads().data_as<double>() + store.numel());
  auto loss_at = [&]() {
    models::LossSum s = model.forward_backward(arena, batch.view(), 0.0, dropout, false);
    arena.reset();
    return grad_scale * s.loss_sum.value();
  };
  const double eps = 1e-6;
  int checked = 0;
  for (const auto& p : store.parameters()) {
    double* value = p.value.data_as<double>();
    const int64_t n = p.value.numel();
    for (int k = 0; k < 8; ++k) {
      const int64_t i = (k == 7) ? n - 1 : (n * k) / 7;
      const double saved = value[i];
      value[i] = saved + eps;
      const double up = loss_at();
      value[i] = saved - eps;
      const double down = loss_at();
      value[i] = saved;
      const double numeric = (up - down) / (2 * eps);
      const double a = analytic[p.offset + static_cast<size_t>(i)];
      EXPECT_NEAR(a, numeric, 1e-7 + 1e-5 * std::abs(numeric)) << p.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 150);
  // The token-type table and the binary head carry gradient.
  for (const char* name : {"embedding.tokentype_embeddings.weight", "binary_head.weight", "pooler.dense.weight"}) {
    const auto& p = store.find(name);
    double largest = 0;
    for (int64_t i = 0; i < p.value.numel(); ++i) largest = std::max(largest, std::abs(analytic[p.offset + i]));
    EXPECT_GT(largest, 1e-4) << name;
  }
}

// Logits of the fixed batch with one token replaced.
struct Outputs {
  std::vector<double> mlm, nsp;
};
Outputs outputs(models::BertModel& model, BertBatch batch, bool with_padding) {
  Arena arena(size_t(1) << 20);
  auto [mlm, nsp] = model.forward_logits(arena, Tensor(batch.tokens.data(), DType::i32, {kBatch, kSeq}),
                                         Tensor(batch.types.data(), DType::i32, {kBatch, kSeq}),
                                         with_padding ? Tensor(batch.padding.data(), DType::u8, {kBatch, kSeq}) : Tensor());
  Outputs out;
  out.mlm.assign(mlm.data_as<double>(), mlm.data_as<double>() + mlm.numel());
  out.nsp.assign(nsp.data_as<double>(), nsp.data_as<double>() + nsp.numel());
  return out;
}
double mlm_at(const Outputs& o, const models::BertModel& m, int64_t s, int64_t b, int64_t v) {
  return o.mlm[static_cast<size_t>((s * kBatch + b) * m.padded_vocab_size() + v)];
}

TEST(BertModel, PaddingMaskHidesPaddedKeysAndAttentionIsBidirectional) {
  models::BertModel model(bert_config(), kVocab, DType::f64, Device::cpu());
  model.initialize(3);
  jitter(model, 9);
  BertBatch base = sample_batch(), padded_changed = sample_batch(), last_changed = sample_batch();
  padded_changed.tokens[5] = 9;       // sample 0's padded position
  last_changed.tokens[6 + 5] = 7;     // sample 1's last (real) token
  const Outputs a = outputs(model, base, true), b = outputs(model, padded_changed, true);
  // Sample 0's real positions and its pooled output do not see the padded token.
  for (int64_t s = 0; s < 5; ++s)
    for (int64_t v = 0; v < kVocab; ++v) EXPECT_EQ(mlm_at(a, model, s, 0, v), mlm_at(b, model, s, 0, v));
  EXPECT_EQ(a.nsp[0], b.nsp[0]);
  EXPECT_EQ(a.nsp[1], b.nsp[1]);
  // Without the mask the same change reaches them (the check above can fail).
  const Outputs c = outputs(model, base, false), d = outputs(model, padded_changed, false);
  EXPECT_NE(mlm_at(c, model, 0, 0, 1), mlm_at(d, model, 0, 0, 1));
  // Bidirectional: the last token changes the first position's logits and the [CLS] pooling.
  const Outputs e = outputs(model, last_changed, true);
  EXPECT_NE(mlm_at(a, model, 0, 1, 1), mlm_at(e, model, 0, 1, 1));
  EXPECT_NE(a.nsp[2], e.nsp[2]);
  // Token types reach the output.
  BertBatch types_changed = sample_batch();
  types_changed.types[6 + 1] = 1;
  const Outputs f = outputs(model, types_changed, true);
  EXPECT_NE(mlm_at(a, model, 1, 1, 2), mlm_at(f, model, 1, 1, 2));
}

TEST(BertModel, LossCountsMaskedPositionsOnly) {
  models::BertModel model(bert_config(), kVocab, DType::f64, Device::cpu());
  model.initialize(4);
  BertBatch base = sample_batch(), label_changed = sample_batch();
  label_changed.labels[0] = 3;  // an unmasked position's label
  Arena arena(size_t(1) << 20);
  const models::LossSum a = model.forward_backward(arena, base.view(), 0.0, {}, false);
  arena.reset();
  const models::LossSum b = model.forward_backward(arena, label_changed.view(), 0.0, {}, false);
  arena.reset();
  EXPECT_EQ(a.loss_sum.value(), b.loss_sum.value());
  label_changed.labels[1] = 3;  // a masked one
  const models::LossSum c = model.forward_backward(arena, label_changed.view(), 0.0, {}, false);
  EXPECT_NE(a.loss_sum.value(), c.loss_sum.value());
  // An untrained model: lm_loss near ln(vocab), sop_loss near ln 2.
  EXPECT_NEAR(a.metric_sums[0].second, std::log(static_cast<double>(kVocab)), 0.5);
  EXPECT_NEAR(a.metric_sums[1].second, std::log(2.0), 0.2);
}

TEST(BertModel, RejectsWhatItDoesNotBuild) {
  auto config = bert_config();
  config.normalization = "rmsnorm";
  EXPECT_THROW(models::BertModel(config, kVocab, DType::f64, Device::cpu()), ConfigError);
  config = bert_config();
  config.untie_embeddings_and_output_weights = true;
  EXPECT_THROW(models::BertModel(config, kVocab, DType::f64, Device::cpu()), ConfigError);
}

}  // namespace
}  // namespace tessera
