// T5 (models/t5.h): the whole backward — shared embedding, encoder and decoder relative position
// biases (bidirectional / causal), biased self-attention with padding masks, cross-attention to the
// encoder, RMS LayerNorms, ReLU and gated-GeLU feed-forwards, dropout everywhere, the tied output
// with d_model^-0.5 scaling or an untied one — against central finite differences of the loss in
// float64; the decoder is causal and the encoder's padding hides keys; HF's bucket function.
#include <gtest/gtest.h>

#include <cmath>

#include "models/tiny_gpt.h"
#include "tessera/models/t5.h"
#include "tessera/ops/relative_position_bias.h"

namespace tessera {
namespace {

constexpr int64_t kVocab = 13, kBatch = 2, kSeq = 6, kDecSeq = 5;

train::ModelConfig t5_config(const std::string& activation, bool untied, double dropout) {
  auto config = test::tiny_model_config(2, 16, 4, kSeq, dropout);
  config.architecture = "t5";
  config.position_embedding_type = "relative";
  config.normalization = "rmsnorm";
  config.add_bias_linear = false;
  config.activation = activation;
  config.untie_embeddings_and_output_weights = untied;
  config.ffn_hidden_size = 12;
  config.num_decoder_layers = 1;
  config.kv_channels = 3;  // inner width 12 != hidden 16, as HF's d_kv allows
  config.relative_attention_num_buckets = 8;
  config.relative_attention_max_distance = 6;
  config.decoder_seq_length = kDecSeq;
  config.layernorm_epsilon = 1e-6;
  return config;
}

struct T5Batch {
  std::vector<int32_t> tokens = {3, 5, 2, 7, 1, 0, /**/ 4, 9, 4, 2, 11, 1};
  std::vector<uint8_t> padding = {1, 1, 1, 1, 1, 0, /**/ 1, 1, 1, 1, 1, 1};
  std::vector<int32_t> decoder = {0, 6, 8, 1, 0, /**/ 0, 12, 3, 10, 5};
  std::vector<uint8_t> decoder_padding = {1, 1, 1, 1, 0, /**/ 1, 1, 1, 1, 1};
  std::vector<int32_t> labels = {6, 8, 1, 0, 0, /**/ 12, 3, 10, 5, 1};
  std::vector<float> mask = {1, 1, 1, 0, 0, /**/ 1, 1, 1, 1, 1};
  models::MicroBatch view() {
    models::MicroBatch b;
    b.tokens = Tensor(tokens.data(), DType::i32, {kBatch, kSeq});
    b.padding_mask = Tensor(padding.data(), DType::u8, {kBatch, kSeq});
    b.decoder_tokens = Tensor(decoder.data(), DType::i32, {kBatch, kDecSeq});
    b.decoder_padding_mask = Tensor(decoder_padding.data(), DType::u8, {kBatch, kDecSeq});
    b.labels = Tensor(labels.data(), DType::i32, {kBatch, kDecSeq});
    b.loss_mask = Tensor(mask.data(), DType::f32, {kBatch, kDecSeq});
    return b;
  }
};

void jitter(models::T5Model& model, uint64_t seed) {
  Tensor all = model.parameters().all_values();
  double* values = all.data_as<double>();
  RandomStream stream(seed, seed);
  for (int64_t i = 0; i < all.numel(); ++i) values[i] += 0.3 * stream.normal(static_cast<uint64_t>(i));
}

struct Variant {
  const char* activation;
  bool untied;
  double dropout;
};

class T5Gradients : public ::testing::TestWithParam<Variant> {};

TEST_P(T5Gradients, BackwardMatchesFiniteDifferences) {
  const Variant v = GetParam();
  models::T5Model model(t5_config(v.activation, v.untied, v.dropout), kVocab, DType::f64, Device::cpu());
  model.initialize(42);
  jitter(model, 7);
  auto& store = model.parameters();
  for (const char* name :
       {"embedding.word_embeddings.weight", "encoder.relative_attention_bias.weight",
        "decoder.relative_attention_bias.weight", "encoder.layers.1.self_attention.linear_q.weight",
        "decoder.layers.0.cross_attention.linear_k.weight", "decoder.layers.0.pre_cross_attn_layernorm.weight",
        "decoder.layers.0.mlp.linear_fc1.weight", "decoder.final_layernorm.weight"})
    EXPECT_GE(store.index_of(name), 0) << name;
  EXPECT_EQ(store.index_of("output_layer.weight") >= 0, v.untied);
  T5Batch batch;
  nn::DropoutContext dropout{5, 11, v.dropout > 0};
  Arena arena(size_t(4) << 20);
  store.zero_grads();
  const double grad_scale = 0.5;
  models::LossSum first = model.forward_backward(arena, batch.view(), grad_scale, dropout);
  arena.reset();
  EXPECT_EQ(first.denominator, 1.0);
  ASSERT_EQ(first.metric_sums.size(), 1u);
  EXPECT_EQ(first.metric_sums[0].first, "lm_loss");
  EXPECT_GT(first.loss_sum.value(), 0.0);
  std::vector<double> analytic(store.all_grads().data_as<double>(), store.all_grads().data_as<double>() + store.numel());
  auto loss_at = [&]() {
    models::LossSum s = model.forward_backward(arena, batch.view(), 0.0, dropout, false);
    arena.reset();
    return grad_scale * s.loss_sum.value();
  };
  EXPECT_EQ(loss_at(), grad_scale * first.loss_sum.value()) << "the forward is deterministic (dropout masks included)";
  const double eps = 1e-6;
  int checked = 0;
  for (const auto& p : store.parameters()) {
    double* value = p.value.data_as<double>();
    const int64_t n = p.value.numel();
    for (int k = 0; k < 6; ++k) {
      const int64_t i = (k == 5) ? n - 1 : (n * k) / 5;
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
  EXPECT_GT(checked, 100);
  for (const char* name : {"encoder.relative_attention_bias.weight", "decoder.relative_attention_bias.weight",
                           "decoder.layers.0.cross_attention.linear_v.weight", "encoder.layers.0.mlp.linear_fc2.weight"}) {
    const auto& p = store.find(name);
    double largest = 0;
    for (int64_t i = 0; i < p.value.numel(); ++i) largest = std::max(largest, std::abs(analytic[p.offset + i]));
    EXPECT_GT(largest, 1e-4) << name << " carries no gradient";
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, T5Gradients,
                         ::testing::Values(Variant{"relu", false, 0.0}, Variant{"geglu", true, 0.0},
                                           Variant{"relu", true, 0.2}, Variant{"geglu", false, 0.2}),
                         [](const auto& info) {
                           return std::string(info.param.activation) + (info.param.untied ? "Untied" : "Tied") +
                                  (info.param.dropout > 0 ? "Dropout" : "");
                         });

// Decoder logits at position t do not depend on decoder tokens after t; encoder tokens behind the
// padding mask change nothing; an unpadded encoder token changes the decoder's logits.
TEST(T5Model, DecoderIsCausalAndEncoderPaddingIsMasked) {
  models::T5Model model(t5_config("relu", false, 0.0), kVocab, DType::f64, Device::cpu());
  model.initialize(3);
  jitter(model, 4);
  auto logits = [&](T5Batch b) {
    Arena arena(size_t(4) << 20);
    Tensor out = model.forward_logits(arena, Tensor(b.tokens.data(), DType::i32, {kBatch, kSeq}),
                                      Tensor(b.padding.data(), DType::u8, {kBatch, kSeq}),
                                      Tensor(b.decoder.data(), DType::i32, {kBatch, kDecSeq}), Tensor());
    return std::vector<double>(out.data_as<double>(), out.data_as<double>() + out.numel());
  };
  const int64_t v = model.padded_vocab_size();
  T5Batch base;
  const auto reference = logits(base);
  T5Batch later = base;
  later.decoder[2] = 4;  // sample 0, position 2
  const auto changed = logits(later);
  for (int64_t t = 0; t < kDecSeq; ++t) {
    double diff = 0;
    for (int64_t j = 0; j < v; ++j) diff = std::max(diff, std::abs(changed[(t * kBatch) * v + j] - reference[(t * kBatch) * v + j]));
    if (t < 2) EXPECT_EQ(diff, 0.0) << "position " << t << " saw a later decoder token";
    else EXPECT_GT(diff, 1e-9) << "position " << t;
  }
  T5Batch padded = base;
  padded.tokens[5] = 9;  // sample 0's padded encoder token
  EXPECT_EQ(logits(padded), reference);
  T5Batch real = base;
  real.tokens[2] = 9;
  EXPECT_NE(logits(real), reference);
}

// HF's _relative_position_bucket (32 buckets, max distance 128): the expected buckets are HF's formula
// evaluated in float32 as HF does (a Python replica rounding each step to f32), boundaries included.
TEST(RelativePositionBucket, MatchesHuggingFaceFormula) {
  const std::vector<std::pair<int64_t, int32_t>> bidirectional = {
      {0, 0},   {-1, 1},    {-7, 7},    {-8, 8},    {-12, 9},  {-16, 10}, {-20, 10}, {-32, 12}, {-64, 14},
      {-127, 15}, {-500, 15}, {1, 17},  {7, 23},    {8, 24},   {16, 26},  {100, 31}, {1000, 31}};
  for (auto [rel, bucket] : bidirectional)
    EXPECT_EQ(ops::relative_position_bucket(rel, true, 32, 128), bucket) << "bidirectional " << rel;
  const std::vector<std::pair<int64_t, int32_t>> causal = {{0, 0},    {5, 0},    {-1, 1},    {-15, 15},
                                                           {-16, 16}, {-20, 17}, {-32, 21},  {-64, 26},
                                                           {-100, 30}, {-128, 31}, {-999, 31}};
  for (auto [rel, bucket] : causal)
    EXPECT_EQ(ops::relative_position_bucket(rel, false, 32, 128), bucket) << "causal " << rel;
}

TEST(T5Model, RejectsWhatItDoesNotBuild) {
  auto config = t5_config("relu", false, 0.0);
  config.normalization = "layernorm";
  EXPECT_THROW(models::T5Model(config, kVocab, DType::f64, Device::cpu()), ConfigError);
  config = t5_config("gelu", false, 0.0);
  EXPECT_THROW(models::T5Model(config, kVocab, DType::f64, Device::cpu()), ConfigError);
  config = t5_config("relu", false, 0.0);
  config.add_bias_linear = true;
  EXPECT_THROW(models::T5Model(config, kVocab, DType::f64, Device::cpu()), ConfigError);
}

}  // namespace
}  // namespace tessera
