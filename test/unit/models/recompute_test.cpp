// Activation recomputation (nn/recompute.h) on the CPU: full (uniform, block) and selective give
// bitwise the gradients and loss of the run without it (dropout on: the recomputed forward draws the
// same masks), also with document masks (data.reset_attention_mask: the recomputed attention masks
// the same documents), and keep exactly the bytes docs/recompute.md says per layer.
#include <gtest/gtest.h>

#include <cstring>

#include "models/tiny_gpt.h"
#include "tessera/core/error.h"
#include "tessera/models/gpt.h"

namespace tessera {
namespace {

constexpr int64_t kVocab = 29, kBatch = 2, kSeq = 16, kHidden = 32, kHeads = 4;

nn::RecomputeConfig recompute(const char* granularity, const char* method = "uniform", int64_t layers = 1) {
  return nn::parse_recompute_config(granularity, method, layers);
}

struct RunResult {
  std::vector<float> grads;
  double loss_sum = 0;
  size_t forward_bytes = 0;  // the caller's arena after the forward and loss (what the chunk keeps)
  size_t prepared_bytes = 0;  // the caller's arena after prepare() (the micro-batch's inputs)
  models::ActivationMemory estimate;  // GPTModel::activation_memory of the same shape
  size_t peak_bytes = 0;  // the caller's arena's peak plus the model's scratch arenas' (forward and backward)
};

// documents: each sample split into three documents (ids 0, 1, 2 from tokens 5 + b and 10 on).
RunResult run(int64_t layers, const nn::RecomputeConfig& config, int micro_batches = 2, bool documents = false) {
  auto model_config = test::tiny_model_config(layers, kHidden, kHeads, kSeq, 0.1);
  models::GPTModel model(model_config, kVocab, DType::f32, Device::cpu());
  model.set_recompute(config);
  model.initialize(42);
  auto& store = model.parameters();
  store.zero_grads();
  RunResult result;
  Arena arena(size_t(1) << 20);
  for (int m = 0; m < micro_batches; ++m) {  // gradients accumulate over micro-batches
    auto tokens_host = test::random_tokens(kBatch, kSeq, kVocab, 3 + static_cast<uint64_t>(m));
    std::vector<float> mask_host(static_cast<size_t>(kBatch * kSeq), 1.0f);
    Tensor tokens(tokens_host.data(), DType::i32, {kBatch, kSeq + 1});
    Tensor mask(mask_host.data(), DType::f32, {kBatch, kSeq});
    std::vector<int32_t> ids_host(static_cast<size_t>(kBatch * kSeq));
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t j = 0; j < kSeq; ++j) ids_host[static_cast<size_t>(b * kSeq + j)] = (j >= 5 + b) + (j >= 10);
    const Tensor ids = documents ? Tensor(ids_host.data(), DType::i32, {kBatch, kSeq}) : Tensor();
    nn::DropoutContext dropout{5, 100 + static_cast<uint64_t>(m), true};
    models::GPTInputs in = model.prepare(arena, {tokens, mask, Tensor(), ids});
    models::GPTChunkActivations acts;
    const size_t before = arena.used_bytes();
    result.prepared_bytes = before;
    model.forward_chunk(0, arena, in, Tensor(), Tensor(), dropout, acts);
    models::LossSum loss = model.chunk_loss(arena, in, acts, 0.5 / in.denominator);
    result.forward_bytes = arena.used_bytes() - before;
    model.backward_chunk(0, arena, in, Tensor(), 0.5 / loss.denominator, dropout, acts);
    result.loss_sum += loss.loss_sum.value();
    arena.reset();
  }
  result.estimate = model.activation_memory(kSeq, kBatch);
  result.peak_bytes = arena.peak_bytes() + model.scratch_peak_bytes();
  const float* g = store.all_grads().data_as<float>();
  result.grads.assign(g, g + store.numel());
  return result;
}

void expect_bitwise(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_EQ(a.grads.size(), b.grads.size()) << what;
  EXPECT_EQ(std::memcmp(&a.loss_sum, &b.loss_sum, sizeof(double)), 0) << what << ": loss " << a.loss_sum << " vs "
                                                                      << b.loss_sum;
  size_t differing = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) differing += std::memcmp(&a.grads[i], &b.grads[i], sizeof(float)) != 0;
  EXPECT_EQ(differing, 0u) << what << ": gradients not bitwise equal";
}

TEST(Recompute, GradientsBitwiseEqualWithoutRecomputation) {
  const RunResult none = run(4, recompute("none"));
  bool any_nonzero = false;
  for (float g : none.grads) any_nonzero |= g != 0.0f;
  ASSERT_TRUE(any_nonzero);
  expect_bitwise(none, run(4, recompute("selective")), "selective");
  for (int64_t n : {1, 2, 3, 4}) expect_bitwise(none, run(4, recompute("full", "uniform", n)), "full uniform " + std::to_string(n));
  for (int64_t n : {1, 2, 4}) expect_bitwise(none, run(4, recompute("full", "block", n)), "full block " + std::to_string(n));
}

TEST(Recompute, GradientsBitwiseEqualWithDocumentMasks) {
  const RunResult none = run(3, recompute("none"), 2, true);
  expect_bitwise(none, run(3, recompute("selective"), 2, true), "selective with documents");
  for (int64_t n : {1, 3}) expect_bitwise(none, run(3, recompute("full", "uniform", n), 2, true), "full uniform " + std::to_string(n) + " with documents");
  expect_bitwise(none, run(3, recompute("full", "block", 2), 2, true), "full block 2 with documents");
  // Not vacuous: the document masks change the loss and the gradients.
  const RunResult plain = run(3, recompute("none"), 2, false);
  EXPECT_NE(plain.loss_sum, none.loss_sum);
  EXPECT_NE(std::memcmp(plain.grads.data(), none.grads.data(), plain.grads.size() * sizeof(float)), 0);
}

TEST(Recompute, DropoutMasksMatter) {
  // The same comparison is not vacuous: another dropout pass key changes the gradients.
  const RunResult a = run(2, recompute("none"), 1);
  auto model_config = test::tiny_model_config(2, kHidden, kHeads, kSeq, 0.0);
  models::GPTModel model(model_config, kVocab, DType::f32, Device::cpu());
  model.initialize(42);
  model.parameters().zero_grads();
  auto tokens_host = test::random_tokens(kBatch, kSeq, kVocab, 3);
  std::vector<float> mask_host(static_cast<size_t>(kBatch * kSeq), 1.0f);
  Arena arena(size_t(1) << 20);
  model.forward_backward(arena, Tensor(tokens_host.data(), DType::i32, {kBatch, kSeq + 1}),
                         Tensor(mask_host.data(), DType::f32, {kBatch, kSeq}), 0.5, nn::DropoutContext{5, 100, true});
  EXPECT_NE(std::memcmp(a.grads.data(), model.parameters().all_grads().data(), a.grads.size() * sizeof(float)), 0);
}

TEST(Recompute, BytesKeptPerLayer) {
  // Per-layer bytes = (forward bytes of 4 layers - of 2 layers) / 2: the embedding and head cancel.
  auto per_layer = [](const nn::RecomputeConfig& c) {
    return (run(4, c, 1).forward_bytes - run(2, c, 1).forward_bytes) / 2;
  };
  const size_t none = per_layer(recompute("none"));
  const size_t selective = per_layer(recompute("selective"));
  const size_t full = per_layer(recompute("full", "uniform", 1));
  const size_t f32 = sizeof(float);
  const size_t probs = kBatch * kHeads * kSeq * kSeq * f32;  // unfused attention's [b, na, s, s]
  const size_t gelu = kSeq * kBatch * 4 * kHidden * f32;     // the MLP's GeLU output [s*b, ffn]
  const size_t hidden = kSeq * kBatch * kHidden * f32;       // one [s*b, h]
  std::printf("bytes kept per layer (s=%lld b=%lld h=%lld heads=%lld, f32): none %zu, selective %zu (-%zu), full %zu\n",
              static_cast<long long>(kSeq), static_cast<long long>(kBatch), static_cast<long long>(kHidden),
              static_cast<long long>(kHeads), none, selective, none - selective, full);
  EXPECT_EQ(none - selective, probs + gelu);
  EXPECT_EQ(full, hidden);  // only each layer's input
  // none: 16 [s*b, h] tensors, the probs and the two LayerNorms' mean and rstd ([s*b] each, 256-byte
  // aligned in the arena); selective: the same less probs and the 4h-wide GeLU output (docs/recompute.md).
  // The output projections' results are not kept (they die at the residual add).
  const size_t stats = 4 * 256;
  EXPECT_EQ(none, hidden * 16 + probs + stats);
  EXPECT_EQ(selective, hidden * 12 + stats);
}

TEST(Recompute, PeakMemoryOfForwardAndBackward) {
  // The whole step's peak (forward and backward, scratch arenas included) shrinks with the layers
  // kept: 8 layers, full recomputation one layer at a time keeps under a third of none's peak.
  const RunResult none_run = run(8, recompute("none"), 1);
  const size_t none = none_run.peak_bytes;
  const size_t selective = run(8, recompute("selective"), 1).peak_bytes;
  const size_t full = run(8, recompute("full", "uniform", 1), 1).peak_bytes;
  std::printf("step peak, 8 layers: none %zu (forward keeps %zu), selective %zu, full %zu bytes\n", none,
              none_run.forward_bytes, selective, full);
  EXPECT_LT(selective, none);
  EXPECT_LT(full * 3, none);
  // Without recomputation the backward still holds one layer's buffers at a time (LayerStack's
  // scratch arenas), not every layer's: the peak stays under what the forward keeps plus two layers'.
  EXPECT_LT(none, none_run.forward_bytes + 2 * static_cast<size_t>(none_run.estimate.per_layer_none) + (size_t(64) << 10));
}

TEST(Recompute, MemoryEstimateMatchesTheArena) {
  // GPTModel::activation_memory against what the forward (and loss) actually keep, per mode.
  for (const auto& c : {recompute("none"), recompute("selective"), recompute("full", "uniform", 2),
                        recompute("full", "block", 1)}) {
    const RunResult r4 = run(4, c, 1), r2 = run(2, c, 1);
    const std::string what = std::string(nn::name(c.granularity)) + " " + nn::name(c.method);
    EXPECT_TRUE(r4.estimate.exact) << what;
    EXPECT_EQ(static_cast<int64_t>(r4.forward_bytes), r4.estimate.kept_per_micro_batch) << what;
    EXPECT_EQ(static_cast<int64_t>(r2.forward_bytes), r2.estimate.kept_per_micro_batch) << what;
    // prepare()'s inputs fit the estimate too (documents only counted, not prepared, here), so the
    // trainer's first block (inputs + kept) holds the whole forward: the logits do not spill
    EXPECT_LE(static_cast<int64_t>(r4.prepared_bytes), r4.estimate.inputs) << what;
    EXPECT_GE(static_cast<int64_t>(r4.prepared_bytes), r4.estimate.inputs - 4096) << what;
    EXPECT_EQ(r4.estimate.per_layer_none, static_cast<int64_t>(run(4, recompute("none"), 1).forward_bytes -
                                                               run(2, recompute("none"), 1).forward_bytes) / 2)
        << what;
  }
}

TEST(Recompute, ConfigErrorsNameTheKeys) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no ConfigError");
  };
  EXPECT_NE(message([] { recompute("partial"); }).find("parallel.recompute_granularity"), std::string::npos);
  EXPECT_NE(message([] { recompute("full", "blocks"); }).find("parallel.recompute_method"), std::string::npos);
  EXPECT_NE(message([] { recompute("full", "uniform", 0); }).find("parallel.recompute_num_layers"), std::string::npos);
  auto model_config = test::tiny_model_config(4, kHidden, kHeads, kSeq, 0.1);
  models::GPTModel model(model_config, kVocab, DType::f32, Device::cpu());
  EXPECT_NE(message([&] { model.set_recompute(recompute("full", "block", 5)); }).find("parallel.recompute_num_layers = 5"),
            std::string::npos);
  EXPECT_EQ(message([&] { model.set_recompute(recompute("selective", "uniform", 5)); }), "no ConfigError");
}

}  // namespace
}  // namespace tessera
