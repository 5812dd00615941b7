// Data-parallel training checks on the CPU backend (label mpi): layouts reproduce the single-rank
// run (lm_loss and grad_norm per iteration), the distributed optimizer's state bytes per rank,
// fp16 dynamic loss scaling with a forced overflow, and the grad-norm counting rule.
// Modes: reference OUT key=value... | compare REF key=value... | memory DP | fp16 | norm_counting
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/models/gpt.h"
#include "tessera/ops/elementwise.h"
#include "tessera/optim/distributed_optimizer.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

int failures = 0;
#define EXPECT_TRUE_MSG(cond, ...)                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      ++failures;                                                                            \
      std::cerr << "[rank " << Runtime::get().world_rank() << "] FAILED " #cond ": " << __VA_ARGS__ \
                << "\n";                                                                     \
    }                                                                                        \
  } while (0)

// A small GPT on mock data, dropout on, 20 iterations, global batch 8 (micro-batch 2).
std::vector<std::string> base_overrides() {
  return {"data.mock_data=true",           "data.vocab_size=50",          "model.num_layers=2",
          "model.hidden_size=32",          "model.num_attention_heads=4", "model.seq_length=16",
          "training.micro_batch_size=2",   "training.global_batch_size=8", "training.train_iters=20",
          "training.eval_interval=0",      "optimizer.lr=1e-3",           "optimizer.lr_warmup_iters=2",
          "optimizer.clip_grad=0.5",       "logging.log_interval=1000",   "training.seed=4321"};
}

train::TrainingSummary run_training(char** first, char** last) {
  std::vector<std::string> overrides = base_overrides();
  for (char** a = first; a != last; ++a) overrides.push_back(*a);
  train::Config config = train::load_config("", overrides);
  return train::Trainer(config, Device::cpu()).train();
}

// The single-rank run every layout is compared with: it must train (20 finite losses and grad
// norms, the loss going down), or the parity tests would compare against garbage.
int reference(int argc, char** argv) {
  TESSERA_CHECK(argc >= 3, "usage: reference OUT [key=value...]");
  auto summary = run_training(argv + 3, argv + argc);
  EXPECT_TRUE_MSG(summary.lm_loss.size() == 20 && summary.grad_norm.size() == 20,
                  summary.lm_loss.size() << " iterations, expected 20");
  for (size_t i = 0; i < summary.lm_loss.size(); ++i)
    EXPECT_TRUE_MSG(std::isfinite(summary.lm_loss[i]) && std::isfinite(summary.grad_norm[i]),
                    "iteration " << i + 1 << ": lm_loss " << summary.lm_loss[i] << ", grad_norm " << summary.grad_norm[i]);
  EXPECT_TRUE_MSG(!summary.lm_loss.empty() && summary.lm_loss.back() < summary.lm_loss.front(),
                  "lm_loss did not decrease over 20 iterations");
  if (failures) return 1;
  if (Runtime::get().world_rank() == 0) {
    std::ofstream out(argv[2]);
    TESSERA_CHECK(out.good(), "cannot write ", argv[2]);
    out.precision(17);
    for (size_t i = 0; i < summary.lm_loss.size(); ++i) out << summary.lm_loss[i] << " " << summary.grad_norm[i] << "\n";
    std::cout << "reference: 20 iterations, lm_loss " << summary.lm_loss.front() << " -> " << summary.lm_loss.back()
              << "\n";
  }
  return 0;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

int compare(int argc, char** argv) {
  TESSERA_CHECK(argc >= 3, "usage: compare REF [key=value...]");
  auto summary = run_training(argv + 3, argv + argc);
  std::ifstream in(argv[2]);
  TESSERA_CHECK(in.good(), "cannot read the reference ", argv[2], " (written by the np1 reference test)");
  std::vector<double> ref_loss, ref_norm;
  double l, g;
  while (in >> l >> g) {
    ref_loss.push_back(l);
    ref_norm.push_back(g);
  }
  EXPECT_TRUE_MSG(ref_loss.size() == summary.lm_loss.size(),
                  ref_loss.size() << " reference iterations vs " << summary.lm_loss.size());
  double worst_loss = 0, worst_norm = 0;
  for (size_t i = 0; i < std::min(ref_loss.size(), summary.lm_loss.size()); ++i) {
    worst_loss = std::max(worst_loss, relative(summary.lm_loss[i], ref_loss[i]));
    worst_norm = std::max(worst_norm, relative(summary.grad_norm[i], ref_norm[i]));
    EXPECT_TRUE_MSG(relative(summary.lm_loss[i], ref_loss[i]) < 1e-5,
                    "iteration " << i + 1 << " lm_loss " << summary.lm_loss[i] << " vs " << ref_loss[i]);
    EXPECT_TRUE_MSG(relative(summary.grad_norm[i], ref_norm[i]) < 1e-5,
                    "iteration " << i + 1 << " grad_norm " << summary.grad_norm[i] << " vs " << ref_norm[i]);
  }
  if (Runtime::get().world_rank() == 0)
    std::cout << "parity over " << summary.lm_loss.size() << " iterations: max relative error lm_loss " << worst_loss
              << ", grad_norm " << worst_norm << " (first loss " << summary.lm_loss.front() << ", last "
              << summary.lm_loss.back() << ")\n";
  return failures ? 1 : 0;
}

// The distributed optimizer holds fp32 main params + exp_avg + exp_avg_sq for 1/dp of the padded
// buffer: 12 * P / dp bytes, P = the parameters laid out with 64-element starts and the bucket
// padded to lcm(dp, 128) (spec 7.1); without it every rank holds 12 * N.
int memory(int, char**) {
  Runtime& rt = Runtime::get();
  const int dp = rt.world_size();
  train::Config config = train::load_config("", base_overrides());
  for (bool distributed : {false, true}) {
    models::GPTModel model(config.model, 50, DType::f32, Device::cpu());
    model.initialize(1);
    parallel::ParallelContext context(config.parallel, dp, rt.world_rank(), Device::cpu());
    optim::DistributedOptimizerOptions options;
    options.shard_over_data_parallel = distributed;
    const auto& params = model.parameters().parameters();
    optim::DistributedOptimizer optimizer(model.parameters(), context, options, std::vector<bool>(params.size(), true),
                                          std::vector<bool>(params.size(), true));
    const int64_t n = model.parameters().numel();
    int64_t padded = n;
    if (distributed) {
      int64_t offset = 0;
      for (auto it = params.rbegin(); it != params.rend(); ++it) offset = (offset + 63) / 64 * 64 + it->value.numel();
      const int64_t multiple = std::lcm(int64_t{dp}, int64_t{128});
      padded = (offset + multiple - 1) / multiple * multiple;
    }
    const size_t expected = 12 * static_cast<size_t>(padded / (distributed ? dp : 1));
    EXPECT_TRUE_MSG(optimizer.state_bytes() == expected, "distributed=" << distributed << ": state bytes "
                                                                        << optimizer.state_bytes() << ", expected "
                                                                        << expected);
    if (rt.world_rank() == 0)
      std::cout << "dp=" << dp << " distributed_optimizer=" << distributed << ": N=" << n
                << " optimizer state bytes per rank " << optimizer.state_bytes() << " (12*N/dp = "
                << 12.0 * static_cast<double>(n) / (distributed ? dp : 1) << ", padding "
                << (padded - n) << " elements)\n";
  }
  return failures ? 1 : 0;
}

// fp16 dynamic loss scaling through the DistributedOptimizer on an f16 parameter: a forced inf on
// one rank skips the step on every rank; with hysteresis 2 the second overflow halves the scale;
// clean steps continue and the scale doubles after growth_interval clean steps.
int fp16(int, char**) {
  Runtime& rt = Runtime::get();
  train::Config config = train::load_config("", base_overrides());
  parallel::ParallelContext context(config.parallel, rt.world_size(), rt.world_rank(), Device::cpu());
  nn::ParameterStore store;
  store.add("w", {16, 8}, nn::Init::normal, 0.02, true);
  store.allocate(DType::f16, Device::cpu());
  Buffer f32_buffer(16 * 8 * sizeof(float));
  Tensor w32 = f32_buffer.as_tensor(DType::f32, {16, 8});
  for (int64_t i = 0; i < w32.numel(); ++i) w32.data_as<float>()[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
  ops::copy(w32, store.value(0));
  optim::DistributedOptimizerOptions options;
  options.shard_over_data_parallel = true;
  options.dynamic_loss_scaling = true;
  options.scaler.initial_scale = 1024;
  options.scaler.growth_interval = 3;
  optim::DistributedOptimizer optimizer(store, context, options, {true}, {true});
  // True gradient g_i = 1e-3 * (i % 7 - 3); its norm is what the optimizer must report (unscaled).
  double true_norm_sq = 0;
  for (int64_t i = 0; i < w32.numel(); ++i) true_norm_sq += std::pow(1e-3 * static_cast<double>(i % 7 - 3), 2);
  auto set_grads = [&](double scale, bool overflow) {
    for (int64_t i = 0; i < w32.numel(); ++i) w32.data_as<float>()[i] = static_cast<float>(scale * 1e-3 * (i % 7 - 3));
    if (overflow && rt.world_rank() == rt.world_size() - 1) w32.data_as<float>()[5] = INFINITY;
    ops::copy(w32, store.grad(0));
  };
  auto snapshot = [&]() {
    std::vector<uint16_t> v(static_cast<size_t>(store.value(0).numel()));
    std::memcpy(v.data(), store.value(0).data(), v.size() * 2);
    return v;
  };
  struct Expect {
    bool overflow;
    double scale_before, scale_after;
  };
  // 1 clean; 2 overflow (hysteresis 2 -> 1, scale kept); 3 overflow (scale halves); 4-6 clean (grows at 6).
  const std::vector<Expect> plan = {{false, 1024, 1024}, {true, 1024, 1024}, {true, 1024, 512},
                                    {false, 512, 512},   {false, 512, 512},  {false, 512, 1024}, {false, 1024, 1024}};
  int64_t steps = 0;
  for (size_t it = 0; it < plan.size(); ++it) {
    const Expect& e = plan[it];
    EXPECT_TRUE_MSG(optimizer.loss_scale() == e.scale_before,
                    "iteration " << it + 1 << " scale " << optimizer.loss_scale() << " expected " << e.scale_before);
    set_grads(optimizer.loss_scale(), e.overflow);
    auto before = snapshot();
    optim::OptimizerStepResult r = optimizer.step(1e-2, 0.0, 0.9, 0.999, 1e-8, 0.0);
    auto after = snapshot();
    if (!e.overflow) ++steps;
    EXPECT_TRUE_MSG(r.skipped == e.overflow, "iteration " << it + 1 << " skipped=" << r.skipped);
    EXPECT_TRUE_MSG((before == after) == e.overflow, "iteration " << it + 1 << ": params changed=" << (before != after));
    EXPECT_TRUE_MSG(optimizer.step_count() == steps, "iteration " << it + 1 << " optimizer steps "
                                                                  << optimizer.step_count() << " expected " << steps);
    EXPECT_TRUE_MSG(optimizer.loss_scale() == e.scale_after,
                    "iteration " << it + 1 << " scale after " << optimizer.loss_scale() << " expected " << e.scale_after);
    if (!e.overflow)
      EXPECT_TRUE_MSG(relative(r.grad_norm, std::sqrt(true_norm_sq)) < 1e-3,
                      "iteration " << it + 1 << " unscaled grad norm " << r.grad_norm << " vs "
                                   << std::sqrt(true_norm_sq));
  }
  // Default Megatron configuration: 2^32 initial scale, interval 1000, hysteresis 2, minimum 1.
  optim::DynamicGradScaler megatron;
  EXPECT_TRUE_MSG(megatron.scale() == 4294967296.0, "initial scale " << megatron.scale());
  for (int i = 0; i < 100; ++i) megatron.update(true);
  EXPECT_TRUE_MSG(megatron.scale() == 1.0, "scale after 100 overflows " << megatron.scale() << " (minimum 1)");
  for (int i = 0; i < 999; ++i) megatron.update(false);
  EXPECT_TRUE_MSG(megatron.scale() == 1.0, "scale grew before 1000 clean steps");
  megatron.update(false);
  EXPECT_TRUE_MSG(megatron.scale() == 2.0, "scale after 1000 clean steps " << megatron.scale());
  if (rt.world_rank() == 0 && failures == 0) std::cout << "fp16 loss scaling: skip, backoff and growth as expected\n";
  return failures ? 1 : 0;
}

// bf16 / fp16 training on the CPU (16-bit params and activations, f32 compute, fp32 main params)
// against the fp32 reference: bf16 tracks it closely; fp16 starts at scale 2^32, so the first
// iterations overflow and are skipped (grad norm inf/nan) until the scale has backed off, then trains.
int mixed_precision(int, char** argv) {
  std::ifstream in(argv[2]);
  TESSERA_CHECK(in.good(), "cannot read the reference ", argv[2]);
  std::vector<double> ref_loss;
  double l, g;
  while (in >> l >> g) ref_loss.push_back(l);
  TESSERA_CHECK(ref_loss.size() == 20, argv[2], " holds ", ref_loss.size(), " iterations, expected 20");
  char bf16_arg[] = "training.precision=bf16";
  char* bf16_args[] = {bf16_arg};
  auto bf16 = run_training(bf16_args, bf16_args + 1);
  EXPECT_TRUE_MSG(bf16.lm_loss.size() == ref_loss.size(), "bf16 ran " << bf16.lm_loss.size() << " iterations");
  for (size_t i = 0; i < std::min(bf16.lm_loss.size(), ref_loss.size()); ++i)
    EXPECT_TRUE_MSG(relative(bf16.lm_loss[i], ref_loss[i]) < 2e-2,
                    "bf16 iteration " << i + 1 << " lm_loss " << bf16.lm_loss[i] << " vs fp32 " << ref_loss[i]);
  char fp16_arg[] = "training.precision=fp16";
  char fp16_iters[] = "training.train_iters=40";  // about 17 overflowing iterations bring 2^32 into fp16 range
  char* fp16_args[] = {fp16_arg, fp16_iters};
  auto fp16 = run_training(fp16_args, fp16_args + 2);
  size_t skipped = 0;
  for (double norm : fp16.grad_norm) skipped += std::isfinite(norm) ? 0 : 1;
  EXPECT_TRUE_MSG(skipped > 0 && skipped < fp16.grad_norm.size(), "fp16 skipped " << skipped << " of "
                                                                                  << fp16.grad_norm.size());
  EXPECT_TRUE_MSG(!std::isfinite(fp16.grad_norm.front()), "fp16 iteration 1 at scale 2^32 must overflow");
  EXPECT_TRUE_MSG(std::isfinite(fp16.grad_norm.back()), "fp16 last iteration still overflowing");
  EXPECT_TRUE_MSG(fp16.lm_loss.back() < fp16.lm_loss.front(), "fp16 loss did not decrease: "
                                                                  << fp16.lm_loss.front() << " -> " << fp16.lm_loss.back());
  if (Runtime::get().world_rank() == 0)
    std::cout << "bf16 last loss " << bf16.lm_loss.back() << " (fp32 " << ref_loss.back() << "); fp16 skipped "
              << skipped << " iterations, last loss " << fp16.lm_loss.back() << "\n";
  return failures ? 1 : 0;
}

// The counting rule on a hand-made store: the shared output-layer copy (roles.copy_of) never counts, replicated
// (LayerNorm) params count on TP rank 0 only, TP-split params count on every TP rank.
int norm_counting(int, char**) {
  nn::ParameterStore last_stage;
  last_stage.add("layers.1.input_layernorm.weight", {8}, nn::Init::ones, 0, false);
  last_stage.add("layers.1.mlp.linear_fc1.weight", {16, 8}, nn::Init::normal, 0.02, true,
                 nn::Sharding::split(0, 32, 2, 1));
  int copy = last_stage.add("output_layer.weight", {64, 8}, nn::Init::normal, 0.02, true,
                            nn::Sharding::split(0, 128, 2, 1));
  last_stage.roles(copy).copy_of = "embedding.word_embeddings.weight";  // as the model registers it
  auto rank0 = optim::grad_norm_counted_params(last_stage, 2, 0);
  auto rank1 = optim::grad_norm_counted_params(last_stage, 2, 1);
  EXPECT_TRUE_MSG(rank0 == (std::vector<bool>{true, true, false}), "tp rank 0 counting");
  EXPECT_TRUE_MSG(rank1 == (std::vector<bool>{false, true, false}), "tp rank 1 counting");
  nn::ParameterStore first_stage;
  first_stage.add("embedding.word_embeddings.weight", {64, 8}, nn::Init::normal, 0.02, true,
                  nn::Sharding::split(0, 128, 2, 0));
  first_stage.add("output_layer.weight", {64, 8}, nn::Init::normal, 0.02, true, nn::Sharding::split(0, 128, 2, 0));
  EXPECT_TRUE_MSG(optim::grad_norm_counted_params(first_stage, 2, 1) == (std::vector<bool>{true, true}),
                  "an untied output layer beside the embedding counts");
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::run_main(argc, argv, [](int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "reference") return tessera::reference(argc, argv);
    if (mode == "compare") return tessera::compare(argc, argv);
    if (mode == "memory") return tessera::memory(argc, argv);
    if (mode == "fp16") return tessera::fp16(argc, argv);
    if (mode == "norm_counting") return tessera::norm_counting(argc, argv);
    if (mode == "mixed_precision" && argc > 2) return tessera::mixed_precision(argc, argv);
    TESSERA_FAIL("unknown mode '", mode, "': reference | compare | memory | fp16 | norm_counting");
  });
}
