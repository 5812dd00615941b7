// A tiny GPT must memorise one fixed batch: the loss falls below 10% of its starting value
// within 200 AdamW steps.
#include <gtest/gtest.h>

#include <cmath>

#include "models/tiny_gpt.h"
#include "tessera/models/gpt.h"
#include "tessera/optim/adamw_optimizer.h"
#include "tessera/optim/param_groups.h"

namespace tessera {
namespace {

TEST(GptOverfit, LossFallsBelowTenPercentIn200Steps) {
  const int64_t vocab = 32, batch = 4, seq = 16;
  auto config = test::tiny_model_config(2, 32, 4, seq, 0.0);
  models::GPTModel model(config, vocab, DType::f32, Device::cpu());
  model.initialize(1234);
  std::vector<optim::ParamEntry> entries;
  for (const auto& p : model.parameters().parameters())
    entries.push_back({p.name, p.value, p.grad, optim::default_weight_decay(p.name, p.shape)});
  optim::AdamWOptimizer optimizer(entries);

  auto tokens_host = test::random_tokens(batch, seq, vocab, 9);
  std::vector<float> mask_host(static_cast<size_t>(batch * seq), 1.0f);
  Tensor tokens(tokens_host.data(), DType::i32, {batch, seq + 1});
  Tensor mask(mask_host.data(), DType::f32, {batch, seq});
  Arena arena(size_t(4) << 20);

  double first = 0, last = 0;
  int steps_needed = -1;
  for (int step = 1; step <= 200; ++step) {
    model.parameters().zero_grads();
    models::LossSum s = model.forward_backward(arena, tokens, mask, 1.0, nn::DropoutContext{});
    arena.reset();
    last = s.loss_sum.value() / s.denominator;
    if (step == 1) first = last;
    if (steps_needed < 0 && last < 0.1 * first) steps_needed = step;
    optimizer.step(3e-3, 0.0, 0.9, 0.95, 1e-8);
  }
  EXPECT_NEAR(first, std::log(32.0), 0.2);  // an untrained model is near uniform
  EXPECT_GT(steps_needed, 0) << "loss went from " << first << " to " << last;
  EXPECT_LT(last, 0.1 * first);
}

}  // namespace
}  // namespace tessera
