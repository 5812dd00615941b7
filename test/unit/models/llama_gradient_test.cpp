// Llama-style GPT variants (RMSNorm, RoPE inside attention (full, partial, interleaved), ALiBi,
// SwiGLU, GQA / MQA, untied output layer, no linear biases): the whole backward against central
// finite differences of the loss in float64, and RoPE taking its position ids from the batch.
#include <gtest/gtest.h>

#include <cmath>

#include "models/tiny_gpt.h"
#include "tessera/models/gpt.h"

namespace tessera {
namespace {

struct Variant {
  const char* name;
  const char* position;  // rope | alibi | learned_absolute | none
  double rotary_percent;
  bool interleaved;
  int64_t groups;
  bool swiglu, rmsnorm, untied, bias;
};

train::ModelConfig variant_config(const Variant& v, int64_t seq) {
  auto config = test::tiny_model_config(2, 16, 4, seq, 0.0);
  config.position_embedding_type = v.position;
  config.rotary_percent = v.rotary_percent;
  config.rotary_interleaved = v.interleaved;
  config.rotary_base = 100.0;  // visible rotation at short sequences
  config.num_query_groups = v.groups;
  config.activation = v.swiglu ? "swiglu" : "gelu";
  config.normalization = v.rmsnorm ? "rmsnorm" : "layernorm";
  config.untie_embeddings_and_output_weights = v.untied;
  config.add_bias_linear = v.bias;
  config.ffn_hidden_size = 24;
  return config;
}

class LlamaGradientTest : public ::testing::TestWithParam<Variant> {};

TEST_P(LlamaGradientTest, BackwardMatchesFiniteDifferences) {
  const Variant v = GetParam();
  const int64_t vocab = 13, batch = 2, seq = 5;
  models::GPTModel model(variant_config(v, seq), vocab, DType::f64, Device::cpu());
  model.initialize(42);
  {
    Tensor all = model.parameters().all_values();
    double* values = all.data_as<double>();
    RandomStream jitter(7, 7);
    for (int64_t i = 0; i < all.numel(); ++i) values[i] += 0.3 * jitter.normal(static_cast<uint64_t>(i));
  }
  auto& store = model.parameters();
  // The spec shapes the parameters: biases, norm biases, position table and output layer.
  EXPECT_EQ(store.index_of("decoder.layers.0.self_attention.linear_qkv.bias") >= 0, v.bias);
  EXPECT_EQ(store.index_of("decoder.layers.0.mlp.linear_fc2.bias") >= 0, v.bias);
  EXPECT_EQ(store.index_of("decoder.final_layernorm.bias") >= 0, !v.rmsnorm);
  EXPECT_EQ(store.index_of("embedding.position_embeddings.weight") >= 0, std::string(v.position) == "learned_absolute");
  EXPECT_EQ(store.index_of("output_layer.weight") >= 0, v.untied);
  EXPECT_EQ(store.find("decoder.layers.1.mlp.linear_fc1.weight").shape[0], v.swiglu ? 48 : 24);
  EXPECT_EQ(store.find("decoder.layers.1.self_attention.linear_qkv.weight").shape[0], (4 + 2 * v.groups) * 4);

  auto tokens_host = test::random_tokens(batch, seq, vocab, 3);
  std::vector<float> mask_host(static_cast<size_t>(batch * seq), 1.0f);
  mask_host[3] = 0.0f;
  Tensor tokens(tokens_host.data(), DType::i32, {batch, seq + 1});
  Tensor mask(mask_host.data(), DType::f32, {batch, seq});
  nn::DropoutContext dropout{5, 11, false};
  Arena arena(size_t(1) << 20);
  store.zero_grads();
  const double grad_scale = 0.5;
  model.forward_backward(arena, tokens, mask, grad_scale, dropout);
  arena.reset();
  std::vector<double> analytic(store.all_grads().data_as<double>(), store.all_grads().data_as<double>() + store.numel());
  auto loss_at = [&]() {
    models::LossSum s = model.forward_backward(arena, tokens, mask, 0.0, dropout);
    arena.reset();
    return grad_scale * s.loss_sum.value() / s.denominator;
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
  EXPECT_GT(checked, 60);
  // The query/key weights carry gradient through RoPE / ALiBi attention.
  const auto& qkv = store.find("decoder.layers.0.self_attention.linear_qkv.weight");
  double largest = 0;
  for (int64_t i = 0; i < qkv.value.numel(); ++i) largest = std::max(largest, std::abs(analytic[qkv.offset + i]));
  EXPECT_GT(largest, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Llama, LlamaGradientTest,
    ::testing::Values(Variant{"LlamaRopeGqaSwigluRmsUntied", "rope", 1.0, false, 2, true, true, true, false},
                      Variant{"RopePartialInterleavedMqa", "rope", 0.5, true, 1, false, true, false, true},
                      Variant{"AlibiMha", "alibi", 1.0, false, 4, false, false, false, true},
                      Variant{"AlibiSwigluNoBias", "alibi", 1.0, false, 2, true, true, true, false},
                      Variant{"NoPositionsSwiglu", "none", 1.0, false, 4, true, false, false, true}),
    [](const auto& info) { return std::string(info.param.name); });

// RoPE takes the position ids given with the batch: shifting every position by a constant keeps the
// logits (RoPE depends on relative positions only), other positions change them.
TEST(LlamaPositions, RopeUsesTheBatchPositionIds) {
  const int64_t vocab = 13, seq = 6;
  models::GPTModel model(variant_config({"", "rope", 1.0, false, 2, true, true, true, false}, seq), vocab,
                         DType::f64, Device::cpu());
  model.initialize(5);
  {
    Tensor all = model.parameters().all_values();
    double* values = all.data_as<double>();
    RandomStream jitter(8, 8);
    for (int64_t i = 0; i < all.numel(); ++i) values[i] += 0.3 * jitter.normal(static_cast<uint64_t>(i));
  }
  std::vector<int32_t> ids = {3, 1, 4, 1, 5, 9};
  auto logits_at = [&](std::vector<int32_t> positions) {
    Arena arena(size_t(1) << 20);
    Tensor out = model.forward_logits(arena, Tensor(ids.data(), DType::i32, {1, seq}), Tensor(),
                                      Tensor(positions.data(), DType::i32, {1, seq}));
    const double* d = out.data_as<double>();
    return std::vector<double>(d, d + out.numel());
  };
  const auto base = logits_at({0, 1, 2, 3, 4, 5}), shifted = logits_at({7, 8, 9, 10, 11, 12});
  const auto spread = logits_at({0, 2, 4, 6, 8, 10});
  double shift_diff = 0, spread_diff = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    shift_diff = std::max(shift_diff, std::abs(base[i] - shifted[i]));
    spread_diff = std::max(spread_diff, std::abs(base[i] - spread[i]));
  }
  EXPECT_LT(shift_diff, 1e-10);
  EXPECT_GT(spread_diff, 1e-4);
}

}  // namespace
}  // namespace tessera
