// The MoE MLP (nn/moe_layer.h) and a MoE GPT: backward against central finite differences in fp32
// (the router's load-balancing and z-losses included, capacity dropping and padding, a shared
// expert, SwiGLU experts), and a tiny MoE GPT whose loss falls in training with the router losses
// logged.
#include <gtest/gtest.h>

#include <cmath>

#include "models/tiny_gpt.h"
#include "test_paths.h"
#include "tessera/core/rng.h"
#include "tessera/models/gpt.h"
#include "tessera/models/model_registry.h"
#include "tessera/nn/moe_layer.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

struct LayerCase {
  bool swiglu;
  int64_t shared;
  double capacity_factor;
  bool pad;
  ops::RouterScore score;
};

class MoeLayerGradient : public ::testing::TestWithParam<LayerCase> {};

TEST_P(MoeLayerGradient, BackwardMatchesFiniteDifferences) {
  const LayerCase c = GetParam();
  const int64_t n = 9, h = 6;
  nn::MoeShape shape;
  shape.num_experts = 4;
  shape.expert_ffn_hidden_size = 5;
  shape.shared_ffn_hidden_size = c.shared;
  shape.router = {2, c.score, false};
  shape.aux_loss_coeff = 0.7;
  shape.z_loss_coeff = 0.3;
  shape.capacity_factor = c.capacity_factor;
  shape.pad_to_capacity = c.pad;
  nn::ParameterStore store;
  nn::MlpOptions mlp;
  mlp.swiglu = c.swiglu;
  nn::MoeLayer layer(store, "mlp", h, shape, 0.5, 0.5, {}, mlp);
  store.allocate(DType::f32, Device::cpu());
  store.initialize(3);
  Buffer xb(static_cast<size_t>(n * h) * sizeof(float), Device::cpu()), gb(static_cast<size_t>(n * h) * sizeof(float), Device::cpu());
  Tensor x = xb.as_tensor(DType::f32, {n, h}), dout = gb.as_tensor(DType::f32, {n, h});
  RandomStream rng(1, 2);
  for (int64_t i = 0; i < n * h; ++i) {
    x.data_as<float>()[i] = static_cast<float>(rng.normal(static_cast<uint64_t>(i)));
    dout.data_as<float>()[i] = static_cast<float>(rng.normal(static_cast<uint64_t>(1000 + i)));
  }
  const double scale = 0.8;  // the micro-batch's weight of its router losses
  Arena arena(size_t(4) << 20);
  // objective = <dout, y> + scale (aux_coeff aux + z_coeff z); returns it and the routing.
  auto objective = [&](std::vector<int32_t>* experts, std::vector<uint8_t>* kept) {
    nn::MoeLayer::Saved saved;
    Tensor y = layer.forward(arena, x, saved);
    double s = 0;
    for (int64_t i = 0; i < n * h; ++i) s += static_cast<double>(y.data_as<float>()[i]) * dout.data_as<float>()[i];
    s += scale * (shape.aux_loss_coeff * saved.aux_loss + shape.z_loss_coeff * saved.z_loss);
    if (experts) *experts = saved.routing.experts;
    if (kept) *kept = saved.routing.kept;
    arena.reset();
    return s;
  };
  std::vector<int32_t> experts;
  std::vector<uint8_t> kept;
  objective(&experts, &kept);
  if (c.capacity_factor > 0) {
    int64_t dropped = 0;
    for (uint8_t k : kept) dropped += k ? 0 : 1;
    EXPECT_GT(dropped, 0) << "the capacity case must drop some slots";
  }
  store.zero_grads();
  nn::MoeLayer::Saved saved;
  layer.forward(arena, x, saved);
  Tensor dx = layer.backward(arena, dout, saved, scale);
  std::vector<float> dx_copy(dx.data_as<float>(), dx.data_as<float>() + n * h);
  const double eps = 1e-2;
  int checked = 0;
  // d / d element of a float array, skipping steps that change the routing (not differentiable there).
  auto check = [&](float* value, double analytic, const std::string& what) {
    const float saved_value = *value;
    std::vector<int32_t> e_up, e_down;
    std::vector<uint8_t> k_up, k_down;
    *value = saved_value + static_cast<float>(eps);
    const double up = objective(&e_up, &k_up);
    *value = saved_value - static_cast<float>(eps);
    const double down = objective(&e_down, &k_down);
    *value = saved_value;
    if (e_up != experts || e_down != experts || k_up != kept || k_down != kept) return;
    const double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(analytic, fd, 3e-3 + 1e-2 * std::fabs(fd)) << what;
    ++checked;
  };
  for (int64_t i = 0; i < n * h; ++i) check(x.data_as<float>() + i, dx_copy[static_cast<size_t>(i)], "x[" + std::to_string(i) + "]");
  for (const auto& p : store.parameters()) {
    const int64_t count = p.value.numel();
    for (int k = 0; k < 4; ++k) {
      const int64_t i = k == 3 ? count - 1 : count * k / 3;
      check(p.value.data_as<float>() + i, p.grad.data_as<float>()[i], p.name + "[" + std::to_string(i) + "]");
    }
  }
  EXPECT_GT(checked, n * h / 2 + 10);
  // Expert parameters reduce over the expert-data group, the router over the data group.
  EXPECT_EQ(store.find("mlp.experts.3.linear_fc2.weight").roles.reduce_group, nn::ReduceGroup::expert_data);
  EXPECT_EQ(store.find("mlp.router.weight").roles.reduce_group, nn::ReduceGroup::data);
}

std::string layer_case_name(const ::testing::TestParamInfo<LayerCase>& info) {
  static const char* const names[] = {"gelu_softmax", "swiglu_sigmoid_shared", "capacity_dropping",
                                      "capacity_padding_shared"};
  return names[info.index];
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeLayerGradient,
                         ::testing::Values(LayerCase{false, 0, 0.0, false, ops::RouterScore::softmax},
                                           LayerCase{true, 3, 0.0, false, ops::RouterScore::sigmoid},
                                           LayerCase{false, 0, 1.0, false, ops::RouterScore::softmax},
                                           LayerCase{false, 3, 1.0, true, ops::RouterScore::softmax}),
                         layer_case_name);

models::TransformerConfig tiny_moe_config() {
  auto config = test::tiny_model_config(2, 8, 2, 5, 0.0);
  config.num_experts = 4;
  config.moe_router_topk = 2;
  config.moe_ffn_hidden_size = 6;
  config.moe_layer_freq = 2;  // layer 0 MoE, layer 1 dense
  config.moe_aux_loss_coeff = 0.5;
  config.moe_z_loss_coeff = 0.2;
  return config;
}

// The whole MoE GPT backward, router losses included at the weight forward_backward gives them
// (grad_scale x (lm_sum / den + sum over MoE layers of aux_coeff aux + z_coeff z)), in fp32.
TEST(MoeGpt, BackwardMatchesFiniteDifferencesWithRouterLosses) {
  const int64_t vocab = 13, batch = 2, seq = 5;
  const auto config = tiny_moe_config();
  models::GPTModel model(config, vocab, DType::f32, Device::cpu());
  model.initialize(42);
  {
    Tensor all = model.parameters().all_values();
    float* v = all.data_as<float>();
    RandomStream jitter(7, 7);
    for (int64_t i = 0; i < all.numel(); ++i) v[i] += static_cast<float>(0.3 * jitter.normal(static_cast<uint64_t>(i)));
  }
  EXPECT_GE(model.parameters().index_of("decoder.layers.0.mlp.router.weight"), 0);
  // The routed token counts are known after the router runs: the estimate is only a guide (the
  // trainer does not presize its arena from it).
  EXPECT_FALSE(model.activation_memory(seq, batch).exact);
  EXPECT_LT(model.parameters().index_of("decoder.layers.1.mlp.router.weight"), 0);  // dense layer 1
  EXPECT_GE(model.parameters().index_of("decoder.layers.1.mlp.linear_fc1.weight"), 0);
  auto tokens_host = test::random_tokens(batch, seq, vocab, 3);
  std::vector<float> mask_host(static_cast<size_t>(batch * seq), 1.0f);
  Tensor tokens(tokens_host.data(), DType::i32, {batch, seq + 1});
  Tensor mask(mask_host.data(), DType::f32, {batch, seq});
  nn::DropoutContext dropout{5, 11, true};  // training: the router statistics are recorded
  Arena arena(size_t(4) << 20);
  auto& store = model.parameters();
  const double grad_scale = 0.5;
  store.zero_grads();
  model.forward_backward(arena, tokens, mask, grad_scale, dropout);
  arena.reset();
  const models::MoeStepStats stats = model.take_moe_stats();
  ASSERT_EQ(stats.aux_loss.size(), 2u);
  EXPECT_GT(stats.aux_loss[0], 0.0);
  EXPECT_EQ(stats.aux_loss[1], 0.0);
  std::vector<float> analytic(store.all_grads().data_as<float>(), store.all_grads().data_as<float>() + store.numel());
  auto objective = [&]() {
    models::LossSum s = model.forward_backward(arena, tokens, mask, 0.0, dropout);
    arena.reset();
    const models::MoeStepStats st = model.take_moe_stats();
    double router = 0;
    for (size_t l = 0; l < st.aux_loss.size(); ++l)
      router += (config.moe_aux_loss_coeff * st.aux_loss[l] + config.moe_z_loss_coeff * st.z_loss[l]) / s.denominator;
    return grad_scale * (s.loss_sum.value() / s.denominator + router);
  };
  const double eps = 1e-2;
  int checked = 0;
  for (const auto& p : store.parameters()) {
    if (p.name.find("decoder.layers.0.mlp") == std::string::npos && p.name.find("layers.0.self_attention.linear_qkv") == std::string::npos)
      continue;
    float* value = p.value.data_as<float>();
    const int64_t count = p.value.numel();
    for (int k = 0; k < 5; ++k) {
      const int64_t i = k == 4 ? count - 1 : count * k / 4;
      const float saved = value[i];
      value[i] = saved + static_cast<float>(eps);
      const double up = objective();
      value[i] = saved - static_cast<float>(eps);
      const double down = objective();
      value[i] = saved;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(analytic[p.offset + static_cast<size_t>(i)], fd, 2e-3 + 2e-2 * std::fabs(fd)) << p.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

// FLOPs count the active expert parameters: top-k experts' FFNs per MoE layer.
TEST(MoeGpt, ActiveExpertParametersForTheFlopCount) {
  auto config = tiny_moe_config();
  // h = 8, expert ffn 6, GeLU with biases: fc1 8 x 6 + 6, fc2 6 x 8 + 8 = 110 per expert; one MoE
  // layer (0 of 2, moe_layer_freq 2) x top-2 = 220.
  EXPECT_EQ(models::moe_active_expert_parameters(config), 220);
  config.activation = "swiglu";  // fc1 doubles, without biases: 2 x (8 x 6) + 6 x 8 = 144 per expert
  config.add_bias_linear = false;
  EXPECT_EQ(models::moe_active_expert_parameters(config), 2 * 144);
  config.num_experts = 0;
  EXPECT_EQ(models::moe_active_expert_parameters(config), 0);
}

TEST(MoeGpt, RejectsWhatTheMoeLayerDoesNotRun) {
  auto config = tiny_moe_config();
  try {
    models::GPTModel model(config, 13, DType::bf16, Device::cpu());
    ADD_FAILURE() << "bf16 MoE was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.num_experts = 4 is not supported yet"), std::string::npos) << e.what();
  }
  config.activation = "relu";
  EXPECT_THROW(models::GPTModel(config, 13, DType::f32, Device::cpu()), ConfigError);
}

// share/configs/gpt-moe-tiny.toml's shape: the loss falls over 30 iterations, the router losses are
// logged (moe_aux_loss near 1 = balanced), and every MoE layer reports its expert load.
TEST(MoeGpt, TinyMoeGptTrainsAndLogsRouterLosses) {
  train::Config config = train::load_config(
      "", {"data.mock_data=true", "data.vocab_size=64", "model.num_layers=2", "model.hidden_size=32",
           "model.num_attention_heads=4", "model.seq_length=16", "model.max_position_embeddings=16",
           "model.hidden_dropout=0.0", "model.attention_dropout=0.0", "model.num_experts=4", "model.moe_router_topk=2",
           "model.moe_ffn_hidden_size=32", "model.moe_aux_loss_coeff=0.01", "model.moe_z_loss_coeff=0.001",
           "model.moe_shared_expert_intermediate_size=16", "training.micro_batch_size=4",
           "training.global_batch_size=8", "training.train_iters=30", "training.eval_interval=0",
           "training.precision=fp32", "optimizer.lr=3e-3", "optimizer.lr_warmup_iters=3", "logging.log_interval=100"});
  std::vector<train::IterationMetrics> seen;
  train::TrainingHooks hooks;
  hooks.on_iteration = [&](const train::IterationMetrics& m) { seen.push_back(m); };
  train::TrainingSummary summary = train::Trainer(config, Device::cpu()).train(hooks);
  ASSERT_EQ(summary.lm_loss.size(), 30u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += summary.lm_loss[static_cast<size_t>(i)] / 5;
  for (int i = 25; i < 30; ++i) last += summary.lm_loss[static_cast<size_t>(i)] / 5;
  EXPECT_LT(last, first - 0.3) << "first five " << first << ", last five " << last;
  for (const auto& m : seen) {
    ASSERT_EQ(m.loss_metrics.size(), 2u);
    EXPECT_EQ(m.loss_metrics[0].first, "moe_aux_loss");
    EXPECT_EQ(m.loss_metrics[1].first, "moe_z_loss");
    EXPECT_GT(m.loss_metrics[0].second, 0.9);  // >= 1 up to the balance of the scores
    EXPECT_LT(m.loss_metrics[0].second, 2.0);
    EXPECT_GT(m.loss_metrics[1].second, 0.0);
    ASSERT_EQ(m.moe_expert_load.size(), 2u);  // both layers are MoE
    double share = 0;
    for (double v : m.moe_expert_load[0].second) share += v;
    EXPECT_NEAR(share, 1.0, 1e-9);
  }
}

// Activation recomputation re-runs MoE layers (routing, experts) in backward: selective and full
// give bitwise the losses, grad norms, router losses and expert loads of no recomputation.
TEST(MoeGpt, RecomputationGivesBitwiseTheSameRun) {
  auto run = [](const std::string& granularity) {
    train::Config config = train::load_config(
        "", {"data.mock_data=true", "data.vocab_size=64", "model.num_layers=3", "model.hidden_size=16",
             "model.num_attention_heads=2", "model.seq_length=8", "model.max_position_embeddings=8",
             "model.num_experts=4", "model.moe_layer_freq=2", "model.moe_aux_loss_coeff=0.01",
             "model.moe_z_loss_coeff=0.001", "training.micro_batch_size=2", "training.global_batch_size=4",
             "training.train_iters=4", "training.eval_interval=0", "training.precision=fp32",
             "optimizer.lr_warmup_iters=1", "logging.log_interval=100",
             "parallel.recompute_granularity=" + granularity, "parallel.recompute_num_layers=2"});
    std::vector<train::IterationMetrics> seen;
    train::TrainingHooks hooks;
    hooks.on_iteration = [&](const train::IterationMetrics& m) { seen.push_back(m); };
    train::Trainer(config, Device::cpu()).train(hooks);
    return seen;
  };
  const auto none = run("none");
  for (const char* granularity : {"selective", "full"}) {
    const auto other = run(granularity);
    ASSERT_EQ(other.size(), none.size());
    for (size_t i = 0; i < none.size(); ++i) {
      EXPECT_EQ(other[i].lm_loss, none[i].lm_loss) << granularity << " iteration " << i + 1;
      EXPECT_EQ(other[i].grad_norm, none[i].grad_norm) << granularity << " iteration " << i + 1;
      EXPECT_EQ(other[i].loss_metrics, none[i].loss_metrics) << granularity << " iteration " << i + 1;
      EXPECT_EQ(other[i].moe_expert_load, none[i].moe_expert_load) << granularity << " iteration " << i + 1;
    }
  }
}

// The bundled example share/configs/gpt-moe-tiny.toml loads and its lm loss falls (a shortened run).
TEST(MoeGpt, BundledTinyConfigTrains) {
  const std::string path = (test::source_dir() / "share/configs/gpt-moe-tiny.toml").string();
  train::Config config = train::load_config(path, {"training.train_iters=20", "logging.log_interval=100"});
  EXPECT_EQ(config.model.num_experts, 8);
  EXPECT_TRUE(config.model.is_moe_layer(2));
  EXPECT_FALSE(config.model.is_moe_layer(3));
  train::TrainingSummary summary = train::Trainer(config, Device::cpu()).train();
  ASSERT_EQ(summary.lm_loss.size(), 20u);
  EXPECT_LT(summary.lm_loss.back(), summary.lm_loss.front() - 0.3);
}

}  // namespace
}  // namespace tessera
