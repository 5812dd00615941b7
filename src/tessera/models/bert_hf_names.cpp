#include "tessera/models/bert_hf_names.h"

#include <map>

#include "tessera/core/error.h"
#include "tessera/models/hf_config_fields.h"
#include "tessera/models/vocab.h"

namespace tessera::models {

std::vector<HfTensorName> megatron_bert_hf_names(const TransformerConfig& m) {
  const int64_t h = m.hidden_size;
  std::vector<HfTensorName> names = {
      {"embedding.word_embeddings.weight", "bert.embeddings.word_embeddings.weight", HfLayout::vocab_rows},
      {"embedding.position_embeddings.weight", "bert.embeddings.position_embeddings.weight"},
      {"embedding.tokentype_embeddings.weight", "bert.embeddings.token_type_embeddings.weight"},
  };
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string t = "encoder.layers." + std::to_string(l) + ".",
                      b = "bert.encoder.layer." + std::to_string(l) + ".";
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      names.push_back({t + "input_layernorm." + k, b + "attention.ln." + k});
    }
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind, qkv = t + "self_attention.linear_qkv." + k;
      names.push_back({qkv, b + "attention.self.query." + k, HfLayout::gqa_qkv_rows, 0, h});
      names.push_back({qkv, b + "attention.self.key." + k, HfLayout::gqa_qkv_rows, h, h});
      names.push_back({qkv, b + "attention.self.value." + k, HfLayout::gqa_qkv_rows, 2 * h, h});
    }
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      names.push_back({t + "self_attention.linear_proj." + k, b + "attention.output.dense." + k});
    }
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      names.push_back({t + "pre_mlp_layernorm." + k, b + "ln." + k});
    }
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      names.push_back({t + "mlp.linear_fc1." + k, b + "intermediate.dense." + k});
    }
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      names.push_back({t + "mlp.linear_fc2." + k, b + "output.dense." + k});
    }
  }
  for (const char* kind : {"weight", "bias"}) {
    const std::string k = kind;
    names.push_back({"encoder.final_layernorm." + k, "bert.encoder.ln." + k});
  }
  for (const char* kind : {"weight", "bias"}) {
    const std::string k = kind;
    names.push_back({"pooler.dense." + k, "bert.pooler.dense." + k});
  }
  names.push_back({"output_layer.bias", "cls.predictions.bias", HfLayout::vocab_rows});
  for (const char* kind : {"weight", "bias"}) {
    const std::string k = kind;
    names.push_back({"lm_head.dense." + k, "cls.predictions.transform.dense." + k});
  }
  for (const char* kind : {"weight", "bias"}) {
    const std::string k = kind;
    names.push_back({"lm_head.layer_norm." + k, "cls.predictions.transform.LayerNorm." + k});
  }
  for (const char* kind : {"weight", "bias"}) {
    const std::string k = kind;
    names.push_back({"binary_head." + k, "cls.seq_relationship." + k});
  }
  return names;
}

namespace {

using hf_config::boolean;
using hf_config::has;
using hf_config::integer;
using hf_config::number;
using hf_config::toml_number;


}  // namespace

std::vector<std::string> megatron_bert_model_keys_from_hf(const nlohmann::json& c, const std::string& path,
                                                          int64_t& vocab_size) {
  const std::string act = c.value("hidden_act", "gelu");
  if (act != "gelu")
    TESSERA_CONFIG_FAIL(path, ": hidden_act '", act, "' is not supported (Tessera's BERT uses the exact GeLU: gelu)");
  const int64_t layers = integer(c, path, "num_hidden_layers"), hidden = integer(c, path, "hidden_size");
  const int64_t heads = integer(c, path, "num_attention_heads"), ffn = integer(c, path, "intermediate_size");
  const int64_t positions = integer(c, path, "max_position_embeddings");
  vocab_size = integer(c, path, "vocab_size");
  if (layers <= 0 || hidden <= 0 || heads <= 0 || ffn <= 0 || positions <= 0 || vocab_size <= 0)
    TESSERA_CONFIG_FAIL(path, ": num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, "
                        "max_position_embeddings and vocab_size must be positive");
  if (hidden % heads != 0)
    TESSERA_CONFIG_FAIL(path, ": hidden_size = ", hidden, " is not divisible by num_attention_heads = ", heads);
  if (has(c, "type_vocab_size") && integer(c, path, "type_vocab_size") != 2)
    TESSERA_CONFIG_FAIL(path, ": type_vocab_size = ", integer(c, path, "type_vocab_size"),
                        " is not supported (BERT's token types are 2)");
  const std::string position_type = c.value("position_embedding_type", "absolute");
  if (position_type != "absolute")
    TESSERA_CONFIG_FAIL(path, ": position_embedding_type '", position_type, "' is not supported (absolute)");
  if (c.contains("tie_word_embeddings") && c["tie_word_embeddings"].is_boolean() && !c["tie_word_embeddings"].get<bool>())
    TESSERA_CONFIG_FAIL(path, ": tie_word_embeddings = false is not supported (the MLM decoder is the word embedding)");
  return {
      "model.architecture=\"bert\"",
      "model.num_layers=" + std::to_string(layers),
      "model.hidden_size=" + std::to_string(hidden),
      "model.num_attention_heads=" + std::to_string(heads),
      "model.num_query_groups=" + std::to_string(heads),
      "model.ffn_hidden_size=" + std::to_string(ffn),
      "model.seq_length=" + std::to_string(positions),
      "model.max_position_embeddings=" + std::to_string(positions),
      "model.position_embedding_type=\"learned_absolute\"",
      "model.normalization=\"layernorm\"",
      "model.activation=\"gelu\"",
      "model.add_bias_linear=true",
      "model.untie_embeddings_and_output_weights=false",
      "model.layernorm_epsilon=" + toml_number(number(c, path, "layer_norm_eps", 1e-12)),
      "model.hidden_dropout=" + toml_number(number(c, path, "hidden_dropout_prob", 0.1)),
      "model.attention_dropout=" + toml_number(number(c, path, "attention_probs_dropout_prob", 0.1)),
      "model.init_method_std=" + toml_number(number(c, path, "initializer_range", 0.02)),
  };
}

nlohmann::json megatron_bert_hf_config(const TransformerConfig& m, int64_t vocab_size) {
  return {
      {"architectures", {"MegatronBertForPreTraining"}},
      {"attention_probs_dropout_prob", m.attention_dropout},
      {"dtype", "float32"},
      {"hidden_act", "gelu"},
      {"hidden_dropout_prob", m.hidden_dropout},
      {"hidden_size", m.hidden_size},
      {"initializer_range", m.init_method_std},
      {"intermediate_size", m.ffn_hidden_size},
      {"layer_norm_eps", m.layernorm_epsilon},
      {"max_position_embeddings", m.max_position_embeddings},
      {"model_type", "megatron-bert"},
      {"num_attention_heads", m.num_attention_heads},
      {"num_hidden_layers", m.num_layers},
      {"pad_token_id", 0},
      {"position_embedding_type", "absolute"},
      {"tie_word_embeddings", true},
      {"type_vocab_size", 2},
      {"use_cache", true},
      {"vocab_size", vocab_size},
  };
}

std::vector<CheckpointTensor> bert_checkpoint_tensors(const TransformerConfig& m, int64_t tp,
                                                      const std::vector<std::vector<ChunkLayout>>& stage_chunks,
                                                      int64_t vocab_size) {
  check_gpt_tensor_parallel(m, tp);
  const int pp = static_cast<int>(stage_chunks.size());
  const int64_t h = m.hidden_size, ffn = m.ffn_hidden_size;
  const int64_t vocab = padded_vocab_size(vocab_size, m.make_vocab_size_divisible_by, tp);
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
        add("embedding.tokentype_embeddings.weight", {2, h}, -1, stage);
        add("embedding.position_embeddings.weight", {m.max_position_embeddings, h}, -1, stage);
      }
      const int64_t count = chunk.num_layers < 0 ? m.num_layers - chunk.first_layer : chunk.num_layers;
      for (int64_t l = chunk.first_layer; l < chunk.first_layer + count; ++l) {
        const std::string p = "encoder.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {h}, -1, stage);
        add(p + "input_layernorm.bias", {h}, -1, stage);
        add(p + "self_attention.linear_qkv.weight", {3 * h, h}, 0, stage);
        add(p + "self_attention.linear_qkv.bias", {3 * h}, 0, stage);
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
        add("encoder.final_layernorm.weight", {h}, -1, stage);
        add("encoder.final_layernorm.bias", {h}, -1, stage);
        add("lm_head.dense.weight", {h, h}, -1, stage);
        add("lm_head.dense.bias", {h}, -1, stage);
        add("lm_head.layer_norm.weight", {h}, -1, stage);
        add("lm_head.layer_norm.bias", {h}, -1, stage);
        if (!stage_has_embedding)
          add("output_layer.weight", {vocab, h}, 0, stage, true, "embedding.word_embeddings.weight");
        add("output_layer.bias", {vocab}, 0, stage, true);
        add("pooler.dense.weight", {h, h}, -1, stage);
        add("pooler.dense.bias", {h}, -1, stage);
        add("binary_head.weight", {2, h}, -1, stage);
        add("binary_head.bias", {2}, -1, stage);
      }
    }
  }
  return tensors;
}

}  // namespace tessera::models
