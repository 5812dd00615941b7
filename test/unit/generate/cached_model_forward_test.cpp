// GPTModel::forward_cached (a prefill, then one cached token at a time, over a left-padded batch)
// equals the training forward without a cache (GPTModel::forward_logits with the same key padding
// mask and position ids) for a Llama-style model (RoPE at per-row positions, GQA, RMSNorm, SwiGLU)
// and an ALiBi GPT: the last token's logits of every step.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tessera/core/buffer.h"
#include "tessera/models/gpt.h"
#include "tessera/train/config.h"

namespace tessera {
namespace {

train::ModelConfig small_model(const std::string& kind) {
  train::ModelConfig m = train::load_config("", {"data.mock_data=true", "data.vocab_size=40"}).model;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.num_query_groups = 4;
  m.ffn_hidden_size = 64;
  m.seq_length = 16;
  m.max_position_embeddings = 16;
  m.hidden_dropout = m.attention_dropout = 0.0;
  m.init_method_std = 0.2;  // peaked logits: a wrong position term shows
  if (kind == "rope") {
    m.position_embedding_type = "rope";
    m.normalization = "rmsnorm";
    m.activation = "swiglu";
    m.num_query_groups = 2;
    m.add_bias_linear = false;
    m.untie_embeddings_and_output_weights = true;
  } else {
    m.position_embedding_type = "alibi";
  }
  return m;
}

// max |cached - uncached| over the last-token logits of a prefill of 5 tokens and 4 cached steps.
double cached_vs_training_forward(const std::string& kind) {
  const int64_t vocab = 40, rows = 3, prefill = 5, capacity = 9;
  models::GPTModel model(small_model(kind), vocab, DType::f32, Device::cpu());
  model.initialize(77);
  const int64_t padded = model.padded_vocab_size();
  std::mt19937 rng(5);
  // Host batch: row b has b padding tokens; sequence-major ids / positions, [b][s] copies for forward_logits.
  std::vector<int32_t> ids(static_cast<size_t>(capacity * rows)), positions(ids.size(), 0);
  std::vector<uint8_t> mask(static_cast<size_t>(rows * capacity), 0);
  for (int64_t s = 0; s < capacity; ++s)
    for (int64_t b = 0; b < rows; ++b) {
      ids[s * rows + b] = static_cast<int32_t>(rng() % vocab);
      if (s >= b) positions[s * rows + b] = static_cast<int32_t>(s - b), mask[b * capacity + s] = 1;
    }
  Arena cache_arena(size_t(4) << 20, Device::cpu()), arena(size_t(16) << 20, Device::cpu());
  models::GPTKvCache cache = model.allocate_kv_cache(cache_arena, rows, capacity);
  double worst = 0;
  for (int64_t past = 0; past < capacity; past += past == 0 ? prefill : 1) {
    const int64_t t = past == 0 ? prefill : 1, seen = past + t;
    arena.reset();
    Tensor logits = model.forward_cached(0, arena, Tensor(ids.data() + past * rows, DType::i32, {t * rows}),
                                         Tensor(positions.data() + past * rows, DType::i32, {t * rows}), Tensor(),
                                         Tensor(mask.data(), DType::u8, {rows, capacity}), cache, past, t, true);
    std::vector<float> cached(logits.data_as<float>(), logits.data_as<float>() + rows * padded);
    // The training forward over the first `seen` tokens.
    std::vector<int32_t> bs_ids(static_cast<size_t>(rows * seen)), bs_pos(bs_ids.size());
    std::vector<uint8_t> bs_mask(bs_ids.size());
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t s = 0; s < seen; ++s) {
        bs_ids[b * seen + s] = ids[s * rows + b];
        bs_pos[b * seen + s] = positions[s * rows + b];
        bs_mask[b * seen + s] = mask[b * capacity + s];
      }
    Tensor full = model.forward_logits(arena, Tensor(bs_ids.data(), DType::i32, {rows, seen}),
                                       Tensor(bs_mask.data(), DType::u8, {rows, seen}),
                                       Tensor(bs_pos.data(), DType::i32, {rows, seen}));
    const float* last = full.data_as<float>() + (seen - 1) * rows * padded;
    for (int64_t i = 0; i < rows * vocab; ++i) {
      const int64_t r = i / vocab, v = i % vocab;
      worst = std::max(worst, static_cast<double>(std::abs(cached[r * padded + v] - last[r * padded + v])));
    }
  }
  return worst;
}

TEST(CachedModelForward, LlamaRopeEqualsTrainingForward) { EXPECT_LT(cached_vs_training_forward("rope"), 1e-4); }

TEST(CachedModelForward, AlibiEqualsTrainingForward) { EXPECT_LT(cached_vs_training_forward("alibi"), 1e-4); }

}  // namespace
}  // namespace tessera
