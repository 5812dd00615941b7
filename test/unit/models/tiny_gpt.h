// Small GPT configurations and random batches shared by the model tests.
#pragma once
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/train/config.h"

namespace tessera::test {

inline train::ModelConfig tiny_model_config(int64_t layers, int64_t hidden, int64_t heads, int64_t seq,
                                            double dropout) {
  train::Config c = train::load_config("", {"data.mock_data=true", "data.vocab_size=8"});
  train::ModelConfig m = c.model;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.num_query_groups = heads;
  m.ffn_hidden_size = 4 * hidden;
  m.seq_length = seq;
  m.max_position_embeddings = seq + 3;
  m.hidden_dropout = dropout;
  m.attention_dropout = dropout;
  m.make_vocab_size_divisible_by = 8;
  return m;
}

// tokens i32 [b, s+1] uniform in [0, vocab), from a fixed stream.
inline std::vector<int32_t> random_tokens(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  RandomStream stream(seed, 77);
  std::vector<int32_t> t(static_cast<size_t>(batch * (seq + 1)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(stream.below(i, static_cast<uint64_t>(vocab)));
  return t;
}

}  // namespace tessera::test
