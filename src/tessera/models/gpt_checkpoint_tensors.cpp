#include "tessera/models/gpt_checkpoint_tensors.h"

#include <map>

#include "tessera/core/error.h"
#include "tessera/models/vocab.h"
#include "tessera/parallel/pipeline_layout.h"

namespace tessera::models {

void check_gpt_tensor_parallel(const train::Config& config) {
  const auto& m = config.model;
  const int64_t tp = config.parallel.tensor_model_parallel_size;
  if (tp < 1) TESSERA_CONFIG_FAIL("parallel.tensor_model_parallel_size = ", tp, " must be positive");
  auto divides = [&](int64_t value, const char* key) {
    if (value % tp != 0)
      TESSERA_CONFIG_FAIL("parallel.tensor_model_parallel_size = ", tp, " does not divide ", key, " = ", value);
  };
  divides(m.num_attention_heads, "model.num_attention_heads");
  divides(m.num_query_groups, "model.num_query_groups");
  divides(m.ffn_hidden_size, "model.ffn_hidden_size");
}

std::vector<CheckpointTensor> gpt_checkpoint_tensors(const train::Config& config, int64_t vocab_size) {
  check_gpt_tensor_parallel(config);
  const auto& m = config.model;
  const int64_t tp = config.parallel.tensor_model_parallel_size;
  const int pp = static_cast<int>(config.parallel.pipeline_model_parallel_size);
  if (pp < 1) TESSERA_CONFIG_FAIL("parallel.pipeline_model_parallel_size = ", pp, " must be positive");
  const int64_t h = m.hidden_size, ffn = m.ffn_hidden_size;
  const int64_t qkv_rows = h + 2 * m.num_query_groups * m.head_dim();
  const int64_t vocab = padded_vocab_size(vocab_size, m.make_vocab_size_divisible_by, tp);

  std::vector<CheckpointTensor> tensors;
  std::map<std::string, size_t> index;
  auto add = [&](const std::string& name, Shape shape, int axis, int stage, bool vocab_rows = false) {
    auto [it, fresh] = index.emplace(name, tensors.size());
    if (fresh) tensors.push_back({name, std::move(shape), axis, vocab_rows, {}});
    tensors[it->second].stages.push_back(stage);
  };
  for (int stage = 0; stage < pp; ++stage) {
    bool stage_has_embedding = false;
    for (const GPTChunkLayout& chunk : parallel::pipeline_chunk_layouts(config, pp, stage)) {
      if (chunk.has_embedding) {
        stage_has_embedding = true;
        add("embedding.word_embeddings.weight", {vocab, h}, 0, stage, true);
        add("embedding.position_embeddings.weight", {m.max_position_embeddings, h}, -1, stage);
      }
      int64_t count = chunk.num_layers < 0 ? m.num_layers - chunk.first_layer : chunk.num_layers;
      for (int64_t l = chunk.first_layer; l < chunk.first_layer + count; ++l) {
        const std::string p = "decoder.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {h}, -1, stage);
        add(p + "input_layernorm.bias", {h}, -1, stage);
        add(p + "self_attention.linear_qkv.weight", {qkv_rows, h}, 0, stage);
        add(p + "self_attention.linear_qkv.bias", {qkv_rows}, 0, stage);
        add(p + "self_attention.linear_proj.weight", {h, h}, 1, stage);
        add(p + "self_attention.linear_proj.bias", {h}, -1, stage);
        add(p + "pre_mlp_layernorm.weight", {h}, -1, stage);
        add(p + "pre_mlp_layernorm.bias", {h}, -1, stage);
        add(p + "mlp.linear_fc1.weight", {ffn, h}, 0, stage);
        add(p + "mlp.linear_fc1.bias", {ffn}, 0, stage);
        add(p + "mlp.linear_fc2.weight", {h, ffn}, 1, stage);
        add(p + "mlp.linear_fc2.bias", {h}, -1, stage);
      }
      if (chunk.has_head) {
        add("decoder.final_layernorm.weight", {h}, -1, stage);
        add("decoder.final_layernorm.bias", {h}, -1, stage);
        // The tied output layer: a copy on a last stage that does not hold the embedding.
        if (!stage_has_embedding) add("output_layer.weight", {vocab, h}, 0, stage, true);
      }
    }
  }
  return tensors;
}

}  // namespace tessera::models
