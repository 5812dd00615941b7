// DistributedOptimizer on the multi-segment ops (CPU, one rank): a few steps equal, bit for bit, a
// straightforward per-parameter reference (unscale, norm, clip, AdamW, round to the model dtype)
// for f32 / bf16 / f16 stores, sharded or not, one bucket or several; the GradBuffer load zeroes
// the padding; the segmented ops' argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/ops/adamw.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/multi_tensor.h"
#include "tessera/optim/distributed_optimizer.h"
#include "tessera/optim/grad_clip.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/config.h"

namespace tessera::optim {
namespace {

const std::vector<Shape> kShapes = {{37, 11}, {7}, {1}, {300, 5}, {64}, {129, 3}};

parallel::ParallelContext& one_rank_context() {
  Runtime& rt = Runtime::init(nullptr, nullptr);
  static train::Config config = train::load_config("", {"data.mock_data=true", "data.vocab_size=50"});
  static parallel::ParallelContext context(config.parallel, 1, rt.world_rank(), Device::cpu());
  return context;
}

std::vector<float> random_values(int64_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Writes f32 values (converted to the tensor's dtype) into t.
void set_from_f32(const Tensor& t, std::vector<float> values) {
  ops::copy(Tensor(values.data(), DType::f32, {t.numel()}), t.flat());
}

std::vector<float> to_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  ops::copy(t.flat(), Tensor(out.data(), DType::f32, {t.numel()}));
  return out;
}

struct Case {
  DType dtype;
  bool sharded;
  int64_t bucket_size;
  bool fp16_scaling;
};

// The reference: per parameter (GradBuffer order, reverse registration) with the per-tensor ops.
struct Reference {
  std::vector<std::vector<float>> main, m, v;
  std::vector<bool> decay, counted;
  int64_t steps = 0;

  double step(const std::vector<std::vector<float>>& grads_in_dtype, double unscale, double lr, double wd,
              double clip) {
    std::vector<std::vector<float>> g = grads_in_dtype;
    double norm_sq = 0;
    for (int i = static_cast<int>(g.size()) - 1; i >= 0; --i) {
      Tensor t(g[i].data(), DType::f32, {static_cast<int64_t>(g[i].size())});
      if (unscale != 1.0) ops::scale_inplace(t, unscale);
      if (counted[i]) norm_sq += ops::sum_of_squares(t);
    }
    const double norm = std::sqrt(norm_sq);
    const double coefficient = clip_coefficient(norm, clip);
    ++steps;
    for (size_t i = 0; i < g.size(); ++i) {
      const int64_t n = static_cast<int64_t>(g[i].size());
      Tensor t(g[i].data(), DType::f32, {n});
      if (coefficient != 1.0) ops::scale_inplace(t, coefficient);
      ops::AdamWParams hyper;
      hyper.lr = lr;
      hyper.weight_decay = decay[i] ? wd : 0.0;
      hyper.beta1 = 0.9;
      hyper.beta2 = 0.95;
      hyper.eps = 1e-8;
      hyper.step = steps;
      ops::adamw_update(Tensor(main[i].data(), DType::f32, {n}), t, Tensor(m[i].data(), DType::f32, {n}),
                        Tensor(v[i].data(), DType::f32, {n}), hyper);
    }
    return norm;
  }
};

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t k = 0; k < a.size(); ++k)
    ASSERT_EQ(std::memcmp(&a[k], &b[k], sizeof(float)), 0) << what << " element " << k << ": " << a[k] << " vs " << b[k];
}

void run_case(const Case& c) {
  SCOPED_TRACE(std::string(dtype_name(c.dtype)) + (c.sharded ? " sharded" : " unsharded") + " bucket " +
               std::to_string(c.bucket_size) + (c.fp16_scaling ? " fp16-scaling" : ""));
  nn::ParameterStore store;
  for (size_t i = 0; i < kShapes.size(); ++i) store.add("p" + std::to_string(i), kShapes[i], nn::Init::normal, 0.02, true);
  store.allocate(c.dtype, Device::cpu());
  const size_t n = kShapes.size();
  Reference ref;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& value = store.value(static_cast<int>(i));
    set_from_f32(value, random_values(value.numel(), 0.5f, 100 + static_cast<uint32_t>(i)));
    ref.main.push_back(to_f32(value));  // the fp32 main param starts as the model param
    ref.m.emplace_back(value.numel(), 0.0f);
    ref.v.emplace_back(value.numel(), 0.0f);
    ref.decay.push_back(i % 2 == 0);
    ref.counted.push_back(i != 2);
  }
  DistributedOptimizerOptions options;
  options.shard_over_data_parallel = c.sharded;
  options.bucket_size = c.bucket_size;
  options.dynamic_loss_scaling = c.fp16_scaling;
  options.scaler.initial_scale = 256;
  DistributedOptimizer optimizer(store, one_rank_context(), options, ref.decay, ref.counted);
  const double lr = 1e-2, wd = 0.1;
  for (int step = 0; step < 4; ++step) {
    const double scale = optimizer.loss_scale();
    std::vector<std::vector<float>> grads;
    for (size_t i = 0; i < n; ++i) {
      const Tensor& grad = store.grad(static_cast<int>(i));
      // Step 2 has large grads so that clipping (clip 1.0) acts; the others may not clip.
      auto g = random_values(grad.numel(), step == 2 ? 3.0f : 0.01f, 1000 * step + static_cast<uint32_t>(i));
      for (auto& x : g) x *= static_cast<float>(scale);
      set_from_f32(grad, g);
      grads.push_back(to_f32(grad));  // what the model dtype kept
    }
    const double expected_norm = ref.step(grads, c.fp16_scaling ? 1.0 / scale : 1.0, lr, wd, 1.0);
    const OptimizerStepResult r = optimizer.step(lr, wd, 0.9, 0.95, 1e-8, 1.0);
    ASSERT_FALSE(r.skipped) << "step " << step;
    EXPECT_EQ(r.grad_norm, expected_norm) << "step " << step;  // bitwise: same sums in the same order
    for (size_t i = 0; i < n; ++i) {
      // The model param is the fp32 main param rounded to the model dtype.
      std::vector<float> rounded = ref.main[i];
      Buffer b(rounded.size() * dtype_size(c.dtype));
      Tensor in_dtype = b.as_tensor(c.dtype, {static_cast<int64_t>(rounded.size())});
      set_from_f32(in_dtype, rounded);
      expect_same_bits(to_f32(store.value(static_cast<int>(i))), to_f32(in_dtype), "param " + std::to_string(i));
    }
  }
  // The optimizer's main params and moments, segment by segment, equal the reference's.
  const auto main = to_f32(optimizer.main_params()), m = to_f32(optimizer.exp_avg()), v = to_f32(optimizer.exp_avg_sq());
  for (const auto& s : optimizer.segments())
    for (int64_t k = 0; k < s.numel; ++k) {
      const size_t local = static_cast<size_t>(s.local_offset + k), in_param = static_cast<size_t>(s.param_offset + k);
      ASSERT_EQ(main[local], ref.main[s.param][in_param]) << "main param " << s.param << "[" << in_param << "]";
      ASSERT_EQ(m[local], ref.m[s.param][in_param]) << "exp_avg " << s.param;
      ASSERT_EQ(v[local], ref.v[s.param][in_param]) << "exp_avg_sq " << s.param;
    }
  EXPECT_EQ(optimizer.step_count(), 4);
}

TEST(MultiTensorOptimizer, F32UnshardedOneBucketEqualsPerParameterReference) {
  run_case({DType::f32, false, 0, false});
}
TEST(MultiTensorOptimizer, F32ShardedSeveralBucketsEqualsPerParameterReference) {
  run_case({DType::f32, true, 700, false});
}
TEST(MultiTensorOptimizer, Bf16UnshardedSeveralBucketsEqualsPerParameterReference) {
  run_case({DType::bf16, false, 500, false});
}
TEST(MultiTensorOptimizer, Bf16ShardedOneBucketEqualsPerParameterReference) {
  run_case({DType::bf16, true, 0, false});
}
TEST(MultiTensorOptimizer, F16ShardedWithLossScalingEqualsPerParameterReference) {
  run_case({DType::f16, true, 900, true});
}

TEST(MultiTensorOptimizer, Fp16OverflowSkipsTheStepAndLeavesParamsUntouched) {
  nn::ParameterStore store;
  store.add("w", {33, 3}, nn::Init::normal, 0.02, true);
  store.add("b", {5}, nn::Init::normal, 0.02, false);
  store.allocate(DType::f16, Device::cpu());
  set_from_f32(store.value(0), random_values(99, 0.5f, 1));
  set_from_f32(store.value(1), random_values(5, 0.5f, 2));
  DistributedOptimizerOptions options;
  options.dynamic_loss_scaling = true;
  options.scaler.initial_scale = 1024;
  options.scaler.hysteresis = 1;
  DistributedOptimizer optimizer(store, one_rank_context(), options, {true, false}, {true, false});
  auto g = random_values(5, 1.0f, 3);
  g[4] = INFINITY;  // in a parameter not counted in the norm: the overflow check still sees it
  set_from_f32(store.grad(1), g);
  set_from_f32(store.grad(0), random_values(99, 1.0f, 4));
  const auto before = to_f32(store.all_values());
  const OptimizerStepResult r = optimizer.step(1e-2, 0.1, 0.9, 0.95, 1e-8, 1.0);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(optimizer.step_count(), 0);
  EXPECT_EQ(optimizer.loss_scale(), 512);
  expect_same_bits(to_f32(store.all_values()), before, "params after a skipped step");
}

TEST(MultiTensorOps, GradBufferLoadZeroesPaddingAndConvertsEveryGradient) {
  nn::ParameterStore store;
  for (size_t i = 0; i < kShapes.size(); ++i) store.add("p" + std::to_string(i), kShapes[i], nn::Init::normal, 0.02, true);
  store.allocate(DType::bf16, Device::cpu());
  for (size_t i = 0; i < kShapes.size(); ++i)
    set_from_f32(store.grad(static_cast<int>(i)), random_values(store.grad(static_cast<int>(i)).numel(), 1.0f, 7));
  parallel::GradBufferOptions layout;
  layout.data_parallel_size = 4;
  layout.pad_for_sharding = true;
  layout.bucket_size = 800;
  parallel::GradBuffer buffer(store, layout);
  ASSERT_GT(buffer.buckets().size(), 1u);
  ops::fill(buffer.all(), NAN);
  std::vector<bool> covered(static_cast<size_t>(buffer.numel()), false);
  for (size_t b = 0; b < buffer.buckets().size(); ++b) buffer.load_bucket_from_store(static_cast<int>(b), store);
  const auto all = to_f32(buffer.all());
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const int p = static_cast<int>(i);
    const auto grad = to_f32(store.grad(p));
    for (size_t k = 0; k < grad.size(); ++k) {
      const size_t at = static_cast<size_t>(buffer.param_start(p)) + k;
      ASSERT_EQ(all[at], grad[k]) << "param " << i << " element " << k;
      covered[at] = true;
    }
  }
  for (size_t k = 0; k < all.size(); ++k)
    if (!covered[k]) ASSERT_EQ(all[k], 0.0f) << "padding element " << k << " not zeroed";
}

// f32 gradients are kept once: the store's gradient views point into the optimizer's reduction buffer
// (padded and reordered), zero_grads() clears that whole buffer, and a bf16 store on the CPU (bf16
// gradients) keeps its own.
TEST(MultiTensorOptimizer, F32StoreGradientsLiveInTheReductionBuffer) {
  nn::ParameterStore store;
  for (size_t i = 0; i < kShapes.size(); ++i) store.add("p" + std::to_string(i), kShapes[i], nn::Init::normal, 0.02, true);
  store.allocate(DType::f32, Device::cpu());
  DistributedOptimizerOptions options;
  options.shard_over_data_parallel = true;
  options.bucket_size = 800;
  const std::vector<bool> flags(kShapes.size(), true);
  DistributedOptimizer optimizer(store, one_rank_context(), options, flags, flags);
  const parallel::GradBuffer& buffer = optimizer.grad_buffer();
  ASSERT_TRUE(store.has_external_grads());
  EXPECT_EQ(store.all_grads().data(), buffer.all().data());
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const int p = static_cast<int>(i);
    EXPECT_EQ(store.grad(p).data(), buffer.param_grad(p).data()) << "parameter " << i;
    EXPECT_EQ(store.grad(p).shape(), kShapes[i]);
  }
  ops::fill(buffer.all(), NAN);
  store.zero_grads();
  for (float x : to_f32(buffer.all())) ASSERT_EQ(x, 0.0f);

  nn::ParameterStore half;
  half.add("w", {33, 3}, nn::Init::normal, 0.02, true);
  half.allocate(DType::bf16, Device::cpu());
  DistributedOptimizer half_optimizer(half, one_rank_context(), DistributedOptimizerOptions{}, {true}, {true});
  EXPECT_FALSE(half.has_external_grads());
  EXPECT_NE(half.all_grads().data(), half_optimizer.grad_buffer().all().data());
}

TEST(MultiTensorOps, TablesOutsideTheTensorsAreRejected) {
  std::vector<float> src(10, 1.0f), dst(10, 0.0f);
  Tensor s(src.data(), DType::f32, {10}), d(dst.data(), DType::f32, {10});
  ops::SegmentTable fits({{0, 2, 0, 8, 0}}, Device::cpu());
  ops::segmented_convert(s, d, fits);
  EXPECT_EQ(dst[1], 0.0f);
  EXPECT_EQ(dst[2], 1.0f);
  ops::SegmentTable too_far({{5, 0, 0, 6, 0}}, Device::cpu());
  EXPECT_THROW(ops::segmented_convert(s, d, too_far), Error);
  EXPECT_THROW(ops::SegmentTable({{-1, 0, 0, 1, 0}}, Device::cpu()), Error);
  std::vector<double> stats(2);
  ops::SegmentTable counted({{0, 0, 0, 4, ops::kSegmentCountedInNorm}, {4, 0, 0, 6, 0}}, Device::cpu());
  src[5] = NAN;
  ops::segmented_grad_stats(s, counted, 1.0, Tensor(stats.data(), DType::f64, {2}));
  EXPECT_EQ(stats[0], 4.0);  // only the counted segment's squares
  EXPECT_GT(stats[1], 0.0);  // the NaN of the uncounted one is still found
}

}  // namespace
}  // namespace tessera::optim
