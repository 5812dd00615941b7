// The whole GPT backward (embedding, every block, final LayerNorm, tied output layer, masked cross
// entropy, dropout) against central finite differences of the loss, in float64.
#include <gtest/gtest.h>

#include <cmath>

#include "models/tiny_gpt.h"
#include "tessera/models/gpt.h"

namespace tessera {
namespace {

struct GradCase {
  double dropout;
  int64_t query_groups;
};

class GptGradientTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(GptGradientTest, BackwardMatchesFiniteDifferences) {
  const int64_t vocab = 13, batch = 2, seq = 5;
  auto config = test::tiny_model_config(2, 8, 2, seq, GetParam().dropout);
  config.num_query_groups = GetParam().query_groups;
  models::GPTModel model(config, vocab, DType::f64, Device::cpu());
  model.initialize(42);
  // Larger weights than the 0.02 init so every path carries a visible gradient.
  {
    Tensor all = model.parameters().all_values();
    double* v = all.data_as<double>();
    RandomStream jitter(7, 7);
    for (int64_t i = 0; i < all.numel(); ++i) v[i] += 0.3 * jitter.normal(static_cast<uint64_t>(i));
  }
  auto tokens_host = test::random_tokens(batch, seq, vocab, 3);
  std::vector<float> mask_host(static_cast<size_t>(batch * seq), 1.0f);
  mask_host[3] = 0.0f;  // a masked-out token must not contribute
  Tensor tokens(tokens_host.data(), DType::i32, {batch, seq + 1});
  Tensor mask(mask_host.data(), DType::f32, {batch, seq});
  nn::DropoutContext dropout{5, 11, GetParam().dropout > 0};
  Arena arena(size_t(1) << 20);

  auto& store = model.parameters();
  store.zero_grads();
  const double grad_scale = 0.5;
  model.forward_backward(arena, tokens, mask, grad_scale, dropout);
  arena.reset();
  std::vector<double> analytic(store.all_grads().data_as<double>(),
                               store.all_grads().data_as<double>() + store.numel());

  auto loss_at = [&]() {
    models::LossSum s = model.forward_backward(arena, tokens, mask, 0.0, dropout);
    arena.reset();
    return grad_scale * s.loss_sum.value() / s.denominator;
  };
  const double eps = 1e-6;
  int checked = 0;
  for (const auto& p : store.parameters()) {
    double* value = p.value.data_as<double>();
    int64_t n = p.value.numel();
    // Up to 6 elements spread over each parameter, including its first and last.
    for (int k = 0; k < 6; ++k) {
      int64_t i = (k == 5) ? n - 1 : (n * k) / 5;
      double saved = value[i];
      value[i] = saved + eps;
      double up = loss_at();
      value[i] = saved - eps;
      double down = loss_at();
      value[i] = saved;
      double numeric = (up - down) / (2 * eps);
      double a = analytic[p.offset + static_cast<size_t>(i)];
      EXPECT_NEAR(a, numeric, 1e-7 + 1e-5 * std::abs(numeric)) << p.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  // Dummy (padding) vocabulary rows never reach the loss: their gradient is exactly zero.
  const auto& wte = store.find("embedding.word_embeddings.weight");
  for (int64_t row = vocab; row < model.padded_vocab_size(); ++row)
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(analytic[wte.offset + static_cast<size_t>(row * 8 + c)], 0.0);
}

INSTANTIATE_TEST_SUITE_P(Gpt, GptGradientTest,
                         ::testing::Values(GradCase{0.0, 2}, GradCase{0.2, 2}, GradCase{0.0, 1}),
                         [](const auto& info) {
                           return std::string(info.param.dropout > 0 ? "Dropout" : "NoDropout") + "Groups" +
                                  std::to_string(info.param.query_groups);
                         });

}  // namespace
}  // namespace tessera
