#include "tessera/models/gpt_checkpoint_tensors.h"

#include <map>

#include "tessera/core/error.h"
#include "tessera/models/vocab.h"

namespace tessera::models {

void check_gpt_tensor_parallel(const TransformerConfig& m, int64_t tp) {
  if (tp < 1) TESSERA_CONFIG_FAIL("parallel.tensor_model_parallel_size = ", tp, " must be positive");
  auto divides = [&](int64_t value, const char* key) {
    if (value % tp != 0)
      TESSERA_CONFIG_FAIL("parallel.tensor_model_parallel_size = ", tp, " does not divide ", key, " = ", value);
  };
  divides(m.num_attention_heads, "model.num_attention_heads");
  divides(m.num_query_groups, "model.num_query_groups");
  divides(m.ffn_hidden_size, "model.ffn_hidden_size");
  if (m.num_experts > 0) {  // the experts split over TP like the dense MLP
    divides(m.expert_ffn_hidden_size(), "model.moe_ffn_hidden_size (0: ffn_hidden_size)");
    divides(m.moe_shared_expert_intermediate_size, "model.moe_shared_expert_intermediate_size");
  }
}

std::vector<CheckpointTensor> gpt_checkpoint_tensors(const TransformerConfig& m, int64_t tp,
                                                     const std::vector<std::vector<ChunkLayout>>& stage_chunks,
                                                     int64_t vocab_size) {
  check_gpt_tensor_parallel(m, tp);
  const int pp = static_cast<int>(stage_chunks.size());
  const int64_t h = m.hidden_size, ffn = m.ffn_hidden_size;
  const int64_t qkv_rows = h + 2 * m.num_query_groups * m.head_dim();
  const int64_t vocab = padded_vocab_size(vocab_size, m.make_vocab_size_divisible_by, tp);
  const LayerSpec spec = decoder_layer_spec(m);
  const bool learned_positions = spec.self_attention.position == PositionEmbedding::learned_absolute;
  const bool norm_bias = spec.norm == Norm::layernorm, bias = m.add_bias_linear;
  const bool gated = (spec.mlp == Mlp::moe ? spec.expert_mlp : spec.mlp) == Mlp::swiglu;  // SwiGLU: (gate, up) pairs
  const bool tied = !m.untie_embeddings_and_output_weights;

  std::vector<CheckpointTensor> tensors;
  std::map<std::string, size_t> index;
  auto add = [&](const std::string& name, Shape shape, int axis, int stage, bool vocab_rows = false,
                 const std::string& copy_of = "") {
    auto [it, fresh] = index.emplace(name, tensors.size());
    if (fresh) tensors.push_back({name, std::move(shape), axis, vocab_rows, copy_of, {}});
    tensors[it->second].stages.push_back(stage);
  };
  for (int stage = 0; stage < pp; ++stage) {
    bool stage_has_embedding = false;
    for (const ChunkLayout& chunk : stage_chunks[static_cast<size_t>(stage)]) {
      if (chunk.has_embedding) {
        stage_has_embedding = true;
        add("embedding.word_embeddings.weight", {vocab, h}, 0, stage, true);
        if (learned_positions) add("embedding.position_embeddings.weight", {m.max_position_embeddings, h}, -1, stage);
      }
      int64_t count = chunk.num_layers < 0 ? m.num_layers - chunk.first_layer : chunk.num_layers;
      for (int64_t l = chunk.first_layer; l < chunk.first_layer + count; ++l) {
        const std::string p = "decoder.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {h}, -1, stage);
        if (norm_bias) add(p + "input_layernorm.bias", {h}, -1, stage);
        add(p + "self_attention.linear_qkv.weight", {qkv_rows, h}, 0, stage);
        if (bias) add(p + "self_attention.linear_qkv.bias", {qkv_rows}, 0, stage);
        add(p + "self_attention.linear_proj.weight", {h, h}, 1, stage);
        if (bias) add(p + "self_attention.linear_proj.bias", {h}, -1, stage);
        add(p + "pre_mlp_layernorm.weight", {h}, -1, stage);
        if (norm_bias) add(p + "pre_mlp_layernorm.bias", {h}, -1, stage);
        // An MLP's linears (nn::MLP): fc1 [gates x f, h] split on rows, fc2 [h, f] on columns.
        auto mlp = [&](const std::string& prefix, int64_t f, int64_t expert) {
          const int64_t rows = (gated ? 2 : 1) * f;
          const size_t first = tensors.size();
          add(prefix + "linear_fc1.weight", {rows, h}, 0, stage);
          if (bias) add(prefix + "linear_fc1.bias", {rows}, 0, stage);
          add(prefix + "linear_fc2.weight", {h, f}, 1, stage);
          if (bias) add(prefix + "linear_fc2.bias", {h}, -1, stage);
          for (size_t i = first; i < tensors.size(); ++i) tensors[i].expert = expert;
        };
        if (m.is_moe_layer(l)) {  // nn::MoeLayer: router, experts (global index), shared expert
          add(p + "mlp.router.weight", {m.num_experts, h}, -1, stage);
          for (int64_t e = 0; e < m.num_experts; ++e)
            mlp(p + "mlp.experts." + std::to_string(e) + ".", m.expert_ffn_hidden_size(), e);
          if (m.moe_shared_expert_intermediate_size > 0)
            mlp(p + "mlp.shared_experts.", m.moe_shared_expert_intermediate_size, -1);
        } else {
          mlp(p + "mlp.", ffn, -1);
        }
      }
      if (chunk.has_head) {
        add("decoder.final_layernorm.weight", {h}, -1, stage);
        if (norm_bias) add("decoder.final_layernorm.bias", {h}, -1, stage);
        // The untied output layer; the tied one: a copy on a last stage that does not hold the embedding.
        if (!tied) add("output_layer.weight", {vocab, h}, 0, stage, true);
        else if (!stage_has_embedding)
          add("output_layer.weight", {vocab, h}, 0, stage, true, "embedding.word_embeddings.weight");
      }
    }
  }
  return tensors;
}

}  // namespace tessera::models
