// AdamWOptimizer over two parameter entries (one decayed, one not) against hand-computed AdamW
// steps, its contiguous moment buffer and argument checks; default_weight_decay's Megatron rule.
#include "tessera/optim/adamw_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/core/buffer.h"

namespace tessera::optim {
namespace {

// A model-owned layout: params and grads each in one contiguous buffer, "w" [2, 2] then "b" [2].
struct TwoParams {
  Buffer params{6 * sizeof(float)};
  Buffer grads{6 * sizeof(float)};
  Tensor w = params.as_tensor(DType::f32, {2, 2}, 0);
  Tensor b = params.as_tensor(DType::f32, {2}, 4 * sizeof(float));
  Tensor w_grad = grads.as_tensor(DType::f32, {2, 2}, 0);
  Tensor b_grad = grads.as_tensor(DType::f32, {2}, 4 * sizeof(float));

  std::vector<ParamEntry> entries() const {
    return {{"layer.weight", w, w_grad, true}, {"layer.bias", b, b_grad, false}};
  }
  float* p() const { return static_cast<float*>(params.data()); }
  float* g() const { return static_cast<float*>(grads.data()); }
};

// Independent scalar AdamW in double, the formula of torch.optim.AdamW.
struct ScalarAdamW {
  double p, m = 0, v = 0;
  void step(double g, int64_t t, double lr, double wd, double b1, double b2, double eps) {
    p -= lr * wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    p -= lr * (m / (1 - std::pow(b1, t))) / (std::sqrt(v / (1 - std::pow(b2, t))) + eps);
  }
};

TEST(AdamWOptimizer, FirstStepByHand) {
  TwoParams model;
  const float init[6] = {1.0f, -2.0f, 0.5f, 3.0f, 1.0f, -1.0f};
  const float grad[6] = {0.5f, -0.25f, 2.0f, 0.0f, 0.5f, -4.0f};
  std::copy(init, init + 6, model.p());
  std::copy(grad, grad + 6, model.g());
  AdamWOptimizer optimizer(model.entries());
  EXPECT_EQ(optimizer.step_count(), 0);
  optimizer.step(/*lr=*/0.1, /*weight_decay=*/0.1, /*beta1=*/0.9, /*beta2=*/0.999, /*eps=*/1e-8);
  EXPECT_EQ(optimizer.step_count(), 1);
  // Step 1: bias correction makes m_hat = g, v_hat = g^2, so the Adam update is lr * sign(g).
  // Decayed "w": p - lr*wd*p - lr*sign(g);   "b" (no decay): p - lr*sign(g).
  EXPECT_NEAR(model.p()[0], 1.0 - 0.01 * 1.0 - 0.1, 1e-6);
  EXPECT_NEAR(model.p()[1], -2.0 + 0.01 * 2.0 + 0.1, 1e-6);
  EXPECT_NEAR(model.p()[2], 0.5 - 0.01 * 0.5 - 0.1, 1e-6);
  EXPECT_NEAR(model.p()[3], 3.0 - 0.01 * 3.0, 1e-6);  // zero grad: decay only
  EXPECT_NEAR(model.p()[4], 1.0 - 0.1, 1e-6);         // bias: no decay
  EXPECT_NEAR(model.p()[5], -1.0 + 0.1, 1e-6);
  // Moments after one step: m = 0.1 g, v = 0.001 g^2.
  const float* m_w = optimizer.exp_avg("layer.weight").data_as<float>();
  const float* v_b = optimizer.exp_avg_sq("layer.bias").data_as<float>();
  EXPECT_NEAR(m_w[0], 0.05, 1e-7);
  EXPECT_NEAR(m_w[2], 0.2, 1e-7);
  EXPECT_NEAR(v_b[0], 0.001 * 0.25, 1e-9);
  EXPECT_NEAR(v_b[1], 0.001 * 16.0, 1e-7);
}

TEST(AdamWOptimizer, SeveralStepsMatchScalarReference) {
  TwoParams model;
  const double lr = 0.01, wd = 0.05, b1 = 0.8, b2 = 0.95, eps = 1e-6;
  std::vector<ScalarAdamW> reference;
  for (int i = 0; i < 6; ++i) {
    model.p()[i] = 0.3f * static_cast<float>(i) - 0.7f;
    reference.push_back({model.p()[i]});
  }
  AdamWOptimizer optimizer(model.entries());
  for (int64_t t = 1; t <= 3; ++t) {
    for (int i = 0; i < 6; ++i) model.g()[i] = static_cast<float>(std::sin(1.7 * i + t));
    optimizer.step(lr, wd, b1, b2, eps);
    for (int i = 0; i < 6; ++i) reference[i].step(model.g()[i], t, lr, i < 4 ? wd : 0.0, b1, b2, eps);
  }
  EXPECT_EQ(optimizer.step_count(), 3);
  const float* m = optimizer.exp_avg_flat().data_as<float>();
  const float* v = optimizer.exp_avg_sq_flat().data_as<float>();
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(model.p()[i], reference[i].p, 1e-6) << "element " << i;
    EXPECT_NEAR(m[i], reference[i].m, 1e-6) << "element " << i;
    EXPECT_NEAR(v[i], reference[i].v, 1e-6) << "element " << i;
  }
}

TEST(AdamWOptimizer, MomentsLiveInOneContiguousBufferInEntryOrder) {
  TwoParams model;
  AdamWOptimizer optimizer(model.entries());
  EXPECT_EQ(optimizer.numel_total(), 6);
  EXPECT_EQ(optimizer.state_bytes(), 2u * 6u * sizeof(float));
  const float* m = optimizer.exp_avg_flat().data_as<float>();
  const float* v = optimizer.exp_avg_sq_flat().data_as<float>();
  EXPECT_EQ(optimizer.exp_avg("layer.weight").data(), m);
  EXPECT_EQ(optimizer.exp_avg("layer.bias").data(), m + 4);
  EXPECT_EQ(optimizer.exp_avg_sq("layer.weight").data(), v);
  EXPECT_EQ(optimizer.exp_avg_sq("layer.bias").data(), v + 4);
  EXPECT_EQ(v, m + 6);
  EXPECT_EQ(optimizer.exp_avg("layer.bias").shape(), (Shape{2}));
  EXPECT_EQ(optimizer.index_of("layer.bias"), 1u);
  EXPECT_THROW(optimizer.exp_avg("layer.gamma"), Error);
  optimizer.set_step_count(41);  // as a checkpoint load would
  EXPECT_EQ(optimizer.step_count(), 41);
}

TEST(AdamWOptimizer, RejectsBadEntries) {
  TwoParams model;
  std::vector<ParamEntry> duplicate = {{"x", model.w, model.w_grad, true}, {"x", model.b, model.b_grad, false}};
  EXPECT_THROW(AdamWOptimizer{duplicate}, Error);
  std::vector<ParamEntry> mismatched = {{"x", model.w, model.b_grad.view({2}), true}};
  EXPECT_THROW(AdamWOptimizer{mismatched}, Error);
  Buffer half(4 * sizeof(uint16_t));
  std::vector<ParamEntry> not_f32 = {{"x", half.as_tensor(DType::bf16, {4}), model.w_grad.flat(), true}};
  EXPECT_THROW(AdamWOptimizer{not_f32}, Error);
  AdamWOptimizer optimizer(model.entries());
  EXPECT_THROW(optimizer.step(0.1, 0.0, 1.0, 0.999, 1e-8), Error);  // beta1 must be < 1
  EXPECT_EQ(optimizer.step_count(), 0);                              // a rejected step is not counted
}

TEST(DefaultWeightDecay, FollowsMegatron) {
  EXPECT_FALSE(default_weight_decay("transformer.h.0.attn.c_attn.bias", {96}));
  EXPECT_FALSE(default_weight_decay("transformer.ln_f.weight", {32}));  // 1-D norm weight
  EXPECT_FALSE(default_weight_decay("decoder.final_layernorm.weight", {768}));
  EXPECT_FALSE(default_weight_decay("odd.bias", {4, 4}));  // the name rule alone
  EXPECT_TRUE(default_weight_decay("transformer.wte.weight", {50257, 32}));
  EXPECT_TRUE(default_weight_decay("transformer.h.0.mlp.c_fc.weight", {32, 128}));
  EXPECT_TRUE(default_weight_decay("scale", {}));  // 0-D: len(shape) != 1 in Megatron
}

}  // namespace
}  // namespace tessera::optim
