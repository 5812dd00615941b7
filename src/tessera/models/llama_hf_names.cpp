#include "tessera/models/llama_hf_names.h"

#include "tessera/core/error.h"
#include "tessera/models/hf_config_fields.h"

namespace tessera::models {

std::vector<HfTensorName> llama_family_hf_names(const TransformerConfig& m, const LlamaMlpNames& mlp_names) {
  const int64_t d = m.head_dim(), q_rows = m.num_attention_heads * d, kv_rows = m.num_query_groups * d;
  const bool bias = m.add_bias_linear;
  std::vector<HfTensorName> names = {{"embedding.word_embeddings.weight", "model.embed_tokens.weight",
                                      HfLayout::vocab_rows}};
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string t = "decoder.layers." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    names.push_back({t + "input_layernorm.weight", h + "input_layernorm.weight"});
    for (const char* kind : {"weight", "bias"}) {
      if (std::string(kind) == "bias" && !bias) continue;
      const std::string qkv = t + "self_attention.linear_qkv." + kind;
      names.push_back({qkv, h + "self_attn.q_proj." + kind, HfLayout::gqa_qkv_rows, 0, q_rows});
      names.push_back({qkv, h + "self_attn.k_proj." + kind, HfLayout::gqa_qkv_rows, q_rows, kv_rows});
      names.push_back({qkv, h + "self_attn.v_proj." + kind, HfLayout::gqa_qkv_rows, q_rows + kv_rows, kv_rows});
      names.push_back({t + "self_attention.linear_proj." + kind, h + "self_attn.o_proj." + kind});
    }
    names.push_back({t + "pre_mlp_layernorm.weight", h + "post_attention_layernorm.weight"});
    mlp_names(names, t, h);
  }
  names.push_back({"decoder.final_layernorm.weight", "model.norm.weight"});
  if (m.untie_embeddings_and_output_weights)
    names.push_back({"output_layer.weight", "lm_head.weight", HfLayout::vocab_rows});
  return names;
}

std::vector<HfTensorName> llama_hf_names(const TransformerConfig& m) {
  const int64_t f = m.ffn_hidden_size;
  const bool bias = m.add_bias_linear;
  return llama_family_hf_names(m, [&](std::vector<HfTensorName>& names, const std::string& t, const std::string& h) {
    for (const char* kind : {"weight", "bias"}) {
      if (std::string(kind) == "bias" && !bias) continue;
      const std::string fc1 = t + "mlp.linear_fc1." + kind;
      names.push_back({fc1, h + "mlp.gate_proj." + kind, HfLayout::swiglu_rows, 0, f});
      names.push_back({fc1, h + "mlp.up_proj." + kind, HfLayout::swiglu_rows, f, f});
      names.push_back({t + "mlp.linear_fc2." + kind, h + "mlp.down_proj." + kind});
    }
  });
}

namespace {

using hf_config::boolean;
using hf_config::has;
using hf_config::integer;
using hf_config::number;
using hf_config::toml_number;


// rope_theta from v4 configs (rope_theta, rope_scaling) or v5 ones (rope_parameters); only the
// default (unscaled) rotary embedding is supported.
double rope_theta(const nlohmann::json& c, const std::string& path) {
  double theta = number(c, path, "rope_theta", 10000.0);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!has(c, key)) continue;
    const nlohmann::json& r = c[key];
    if (!r.is_object()) TESSERA_CONFIG_FAIL(path, ": field '", key, "' must be an object, got ", r.dump());
    const std::string type = r.value("rope_type", r.value("type", std::string("default")));
    if (type != "default")
      TESSERA_CONFIG_FAIL(path, ": ", key, ".rope_type = '", type, "' is not supported yet (only 'default': no "
                          "RoPE scaling)");
    if (r.contains("rope_theta")) theta = number(r, path + " " + key, "rope_theta", theta);
  }
  return theta;
}

}  // namespace

std::vector<std::string> llama_model_keys_from_hf(const nlohmann::json& c, const std::string& path,
                                                  int64_t& vocab_size) {
  const std::string act = c.value("hidden_act", "silu");
  if (act != "silu")
    TESSERA_CONFIG_FAIL(path, ": hidden_act '", act, "' is not supported (a Llama MLP is SwiGLU: hidden_act silu)");
  const int64_t layers = integer(c, path, "num_hidden_layers"), hidden = integer(c, path, "hidden_size");
  const int64_t heads = integer(c, path, "num_attention_heads"), ffn = integer(c, path, "intermediate_size");
  const int64_t groups = has(c, "num_key_value_heads") ? integer(c, path, "num_key_value_heads") : heads;
  const int64_t positions = integer(c, path, "max_position_embeddings");
  vocab_size = integer(c, path, "vocab_size");
  if (layers <= 0 || hidden <= 0 || heads <= 0 || groups <= 0 || ffn <= 0 || positions <= 0 || vocab_size <= 0)
    TESSERA_CONFIG_FAIL(path, ": num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, "
                        "intermediate_size, max_position_embeddings and vocab_size must be positive");
  if (hidden % heads != 0)
    TESSERA_CONFIG_FAIL(path, ": hidden_size = ", hidden, " is not divisible by num_attention_heads = ", heads);
  if (heads % groups != 0)
    TESSERA_CONFIG_FAIL(path, ": num_key_value_heads = ", groups, " does not divide num_attention_heads = ", heads);
  if (has(c, "head_dim") && integer(c, path, "head_dim") != hidden / heads)
    TESSERA_CONFIG_FAIL(path, ": head_dim = ", integer(c, path, "head_dim"), " != hidden_size / num_attention_heads = ",
                        hidden / heads, " is not supported");
  const bool attention_bias = boolean(c, path, "attention_bias", false), mlp_bias = boolean(c, path, "mlp_bias", false);
  if (attention_bias != mlp_bias)
    TESSERA_CONFIG_FAIL(path, ": attention_bias = ", attention_bias, " with mlp_bias = ", mlp_bias,
                        " is not supported (model.add_bias_linear sets both)");
  if (has(c, "pretraining_tp") && integer(c, path, "pretraining_tp") != 1)
    TESSERA_CONFIG_FAIL(path, ": pretraining_tp = ", integer(c, path, "pretraining_tp"), " is not supported (use 1)");
  const double partial = number(c, path, "partial_rotary_factor", 1.0);
  return {
      "model.architecture=\"gpt\"",
      "model.num_layers=" + std::to_string(layers),
      "model.hidden_size=" + std::to_string(hidden),
      "model.num_attention_heads=" + std::to_string(heads),
      "model.num_query_groups=" + std::to_string(groups),
      "model.ffn_hidden_size=" + std::to_string(ffn),
      "model.seq_length=" + std::to_string(positions),
      "model.max_position_embeddings=" + std::to_string(positions),
      "model.position_embedding_type=\"rope\"",
      "model.rotary_base=" + toml_number(rope_theta(c, path)),
      "model.rotary_percent=" + toml_number(partial),
      "model.rotary_interleaved=false",
      "model.normalization=\"rmsnorm\"",
      "model.activation=\"swiglu\"",
      "model.add_bias_linear=" + std::string(attention_bias ? "true" : "false"),
      "model.untie_embeddings_and_output_weights=" +
          std::string(boolean(c, path, "tie_word_embeddings", false) ? "false" : "true"),
      "model.layernorm_epsilon=" + toml_number(number(c, path, "rms_norm_eps", 1e-6)),
      "model.hidden_dropout=0.0",
      "model.attention_dropout=" + toml_number(number(c, path, "attention_dropout", 0.0)),
      "model.init_method_std=" + toml_number(number(c, path, "initializer_range", 0.02)),
  };
}

nlohmann::json llama_hf_config(const TransformerConfig& m, int64_t vocab_size) {
  return {
      {"architectures", {"LlamaForCausalLM"}},
      {"attention_bias", m.add_bias_linear},
      {"attention_dropout", m.attention_dropout},
      {"bos_token_id", 1},
      {"dtype", "float32"},
      {"eos_token_id", 2},
      {"head_dim", m.head_dim()},
      {"hidden_act", "silu"},
      {"hidden_size", m.hidden_size},
      {"initializer_range", m.init_method_std},
      {"intermediate_size", m.ffn_hidden_size},
      {"max_position_embeddings", m.max_position_embeddings},
      {"mlp_bias", m.add_bias_linear},
      {"model_type", "llama"},
      {"num_attention_heads", m.num_attention_heads},
      {"num_hidden_layers", m.num_layers},
      {"num_key_value_heads", m.num_query_groups},
      {"pretraining_tp", 1},
      {"rms_norm_eps", m.layernorm_epsilon},
      {"rope_scaling", nullptr},
      {"rope_theta", m.rotary_base},
      {"tie_word_embeddings", !m.untie_embeddings_and_output_weights},
      {"use_cache", true},
      {"vocab_size", vocab_size},
  };
}

}  // namespace tessera::models
