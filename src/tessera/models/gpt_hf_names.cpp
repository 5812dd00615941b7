#include "tessera/models/gpt_hf_names.h"

#include "tessera/core/error.h"

namespace tessera::models {

std::vector<HfTensorName> gpt2_hf_names(const TransformerConfig& model) {
  std::vector<HfTensorName> names = {
      {"embedding.word_embeddings.weight", "transformer.wte.weight", HfLayout::vocab_rows},
      {"embedding.position_embeddings.weight", "transformer.wpe.weight", HfLayout::same},
  };
  for (int64_t l = 0; l < model.num_layers; ++l) {
    const std::string t = "decoder.layers." + std::to_string(l) + ".", h = "transformer.h." + std::to_string(l) + ".";
    names.push_back({t + "input_layernorm.weight", h + "ln_1.weight", HfLayout::same});
    names.push_back({t + "input_layernorm.bias", h + "ln_1.bias", HfLayout::same});
    names.push_back({t + "self_attention.linear_qkv.weight", h + "attn.c_attn.weight", HfLayout::qkv_weight});
    names.push_back({t + "self_attention.linear_qkv.bias", h + "attn.c_attn.bias", HfLayout::qkv_bias});
    names.push_back({t + "self_attention.linear_proj.weight", h + "attn.c_proj.weight", HfLayout::transposed});
    names.push_back({t + "self_attention.linear_proj.bias", h + "attn.c_proj.bias", HfLayout::same});
    names.push_back({t + "pre_mlp_layernorm.weight", h + "ln_2.weight", HfLayout::same});
    names.push_back({t + "pre_mlp_layernorm.bias", h + "ln_2.bias", HfLayout::same});
    names.push_back({t + "mlp.linear_fc1.weight", h + "mlp.c_fc.weight", HfLayout::transposed});
    names.push_back({t + "mlp.linear_fc1.bias", h + "mlp.c_fc.bias", HfLayout::same});
    names.push_back({t + "mlp.linear_fc2.weight", h + "mlp.c_proj.weight", HfLayout::transposed});
    names.push_back({t + "mlp.linear_fc2.bias", h + "mlp.c_proj.bias", HfLayout::same});
  }
  names.push_back({"decoder.final_layernorm.weight", "transformer.ln_f.weight", HfLayout::same});
  names.push_back({"decoder.final_layernorm.bias", "transformer.ln_f.bias", HfLayout::same});
  return names;
}

namespace {

const nlohmann::json& field(const nlohmann::json& config, const std::string& path, const char* key,
                            const char* alias = nullptr) {
  if (config.contains(key) && !config[key].is_null()) return config[key];
  if (alias && config.contains(alias) && !config[alias].is_null()) return config[alias];
  TESSERA_CONFIG_FAIL(path, ": missing field '", key, "'");
}

int64_t integer(const nlohmann::json& config, const std::string& path, const char* key, const char* alias = nullptr) {
  const nlohmann::json& v = field(config, path, key, alias);
  if (!v.is_number_integer()) TESSERA_CONFIG_FAIL(path, ": field '", key, "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}

double number(const nlohmann::json& config, const std::string& path, const char* key, double fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_number()) TESSERA_CONFIG_FAIL(path, ": field '", key, "' must be a number, got ", config[key].dump());
  return config[key].get<double>();
}

std::string toml_number(double v) {
  std::string s = nlohmann::json(v).dump();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::vector<std::string> gpt2_model_keys_from_hf(const nlohmann::json& config, const std::string& path,
                                                 int64_t& vocab_size) {
  const std::string activation = config.value("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh" && activation != "gelu_fast")
    TESSERA_CONFIG_FAIL(path, ": activation_function '", activation,
                        "' is not supported; allowed: gelu_new, gelu_pytorch_tanh, gelu_fast (the tanh GELU)");
  if (!config.value("tie_word_embeddings", true))
    TESSERA_CONFIG_FAIL(path, ": tie_word_embeddings = false (an untied GPT-2 head) is not supported yet");
  if (config.value("scale_attn_by_inverse_layer_idx", false))
    TESSERA_CONFIG_FAIL(path, ": scale_attn_by_inverse_layer_idx = true is not supported");
  if (!config.value("scale_attn_weights", true))
    TESSERA_CONFIG_FAIL(path, ": scale_attn_weights = false is not supported");
  if (config.value("add_cross_attention", false))
    TESSERA_CONFIG_FAIL(path, ": add_cross_attention = true is not supported");
  const int64_t layers = integer(config, path, "n_layer", "num_hidden_layers");
  const int64_t hidden = integer(config, path, "n_embd", "hidden_size");
  const int64_t heads = integer(config, path, "n_head", "num_attention_heads");
  const int64_t positions = integer(config, path, "n_positions", "max_position_embeddings");
  const int64_t ffn = config.contains("n_inner") && !config["n_inner"].is_null() ? integer(config, path, "n_inner")
                                                                                 : 4 * hidden;
  vocab_size = integer(config, path, "vocab_size");
  if (layers <= 0 || hidden <= 0 || heads <= 0 || positions <= 0 || ffn <= 0 || vocab_size <= 0)
    TESSERA_CONFIG_FAIL(path, ": n_layer, n_embd, n_head, n_positions, n_inner and vocab_size must be positive");
  if (hidden % heads != 0) TESSERA_CONFIG_FAIL(path, ": n_embd = ", hidden, " is not divisible by n_head = ", heads);
  return {
      "model.architecture=\"gpt\"",
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
      "model.untie_embeddings_and_output_weights=false",
      "model.layernorm_epsilon=" + toml_number(number(config, path, "layer_norm_epsilon", 1e-5)),
      "model.hidden_dropout=" + toml_number(number(config, path, "resid_pdrop", 0.1)),
      "model.attention_dropout=" + toml_number(number(config, path, "attn_pdrop", 0.1)),
      "model.init_method_std=" + toml_number(number(config, path, "initializer_range", 0.02)),
  };
}

nlohmann::json gpt2_hf_config(const TransformerConfig& m, int64_t vocab_size) {
  return {
      {"activation_function", "gelu_new"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"attn_pdrop", m.attention_dropout},
      {"bos_token_id", vocab_size - 1},
      {"dtype", "float32"},
      {"embd_pdrop", m.hidden_dropout},
      {"eos_token_id", vocab_size - 1},
      {"initializer_range", m.init_method_std},
      {"layer_norm_epsilon", m.layernorm_epsilon},
      {"model_type", "gpt2"},
      {"n_embd", m.hidden_size},
      {"n_head", m.num_attention_heads},
      {"n_inner", m.ffn_hidden_size},
      {"n_layer", m.num_layers},
      {"n_positions", m.max_position_embeddings},
      {"resid_pdrop", m.hidden_dropout},
      {"scale_attn_by_inverse_layer_idx", false},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"use_cache", true},
      {"vocab_size", vocab_size},
  };
}

}  // namespace tessera::models
