#include "tessera/models/t5_hf_names.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/models/hf_config_fields.h"
#include "tessera/models/vocab.h"

namespace tessera::models {

namespace {
int64_t decoder_layers(const TransformerConfig& m) { return m.num_decoder_layers > 0 ? m.num_decoder_layers : m.num_layers; }
int64_t inner(const TransformerConfig& m) {
  return m.num_attention_heads * (m.kv_channels > 0 ? m.kv_channels : m.hidden_size / m.num_attention_heads);
}
int64_t ffn(const TransformerConfig& m) { return m.ffn_hidden_size > 0 ? m.ffn_hidden_size : 4 * m.hidden_size; }
bool gated(const TransformerConfig& m) { return m.activation == "geglu"; }
}  // namespace

std::vector<HfTensorName> t5_hf_names(const TransformerConfig& m) {
  std::vector<HfTensorName> names = {
      {"embedding.word_embeddings.weight", "shared.weight", HfLayout::vocab_rows},
  };
  auto attention = [&](const std::string& t, const std::string& h) {
    names.push_back({t + ".linear_q.weight", h + ".q.weight"});
    names.push_back({t + ".linear_k.weight", h + ".k.weight"});
    names.push_back({t + ".linear_v.weight", h + ".v.weight"});
    names.push_back({t + ".linear_proj.weight", h + ".o.weight"});
  };
  auto mlp = [&](const std::string& t, const std::string& h) {
    if (gated(m)) {
      names.push_back({t + ".linear_fc1.weight", h + ".wi_0.weight", HfLayout::swiglu_rows, 0, ffn(m)});
      names.push_back({t + ".linear_fc1.weight", h + ".wi_1.weight", HfLayout::swiglu_rows, ffn(m), ffn(m)});
    } else {
      names.push_back({t + ".linear_fc1.weight", h + ".wi.weight"});
    }
    names.push_back({t + ".linear_fc2.weight", h + ".wo.weight"});
  };
  for (const char* stack : {"encoder", "decoder"}) {
    const std::string s = stack;
    const bool decoder = s == "decoder";
    const int64_t layers = decoder ? decoder_layers(m) : m.num_layers;
    for (int64_t l = 0; l < layers; ++l) {
      const std::string t = s + ".layers." + std::to_string(l), h = s + ".block." + std::to_string(l) + ".layer.";
      attention(t + ".self_attention", h + "0.SelfAttention");
      if (l == 0)
        names.push_back({s + ".relative_attention_bias.weight", h + "0.SelfAttention.relative_attention_bias.weight"});
      names.push_back({t + ".input_layernorm.weight", h + "0.layer_norm.weight"});
      int next = 1;
      if (decoder) {
        attention(t + ".cross_attention", h + "1.EncDecAttention");
        names.push_back({t + ".pre_cross_attn_layernorm.weight", h + "1.layer_norm.weight"});
        next = 2;
      }
      mlp(t + ".mlp", h + std::to_string(next) + ".DenseReluDense");
      names.push_back({t + ".pre_mlp_layernorm.weight", h + std::to_string(next) + ".layer_norm.weight"});
    }
    names.push_back({s + ".final_layernorm.weight", s + ".final_layer_norm.weight"});
  }
  if (m.untie_embeddings_and_output_weights)
    names.push_back({"output_layer.weight", "lm_head.weight", HfLayout::vocab_rows});
  return names;
}

namespace {

using hf_config::boolean;
using hf_config::has;
using hf_config::integer;
using hf_config::number;
using hf_config::toml_number;


}  // namespace

std::vector<std::string> t5_model_keys_from_hf(const nlohmann::json& c, const std::string& path, int64_t& vocab_size) {
  const std::string proj = c.value("feed_forward_proj", "relu");
  std::string activation;
  if (proj == "relu") activation = "relu";
  else if (proj == "gated-gelu") activation = "geglu";
  else
    TESSERA_CONFIG_FAIL(path, ": feed_forward_proj '", proj,
                        "' is not supported (Tessera's T5 builds relu, T5 v1.0, and gated-gelu, v1.1)");
  const int64_t layers = integer(c, path, "num_layers"), hidden = integer(c, path, "d_model");
  const int64_t decoder = has(c, "num_decoder_layers") ? integer(c, path, "num_decoder_layers") : layers;
  const int64_t heads = integer(c, path, "num_heads"), kv = integer(c, path, "d_kv"), ff = integer(c, path, "d_ff");
  const int64_t buckets = has(c, "relative_attention_num_buckets") ? integer(c, path, "relative_attention_num_buckets") : 32;
  const int64_t distance =
      has(c, "relative_attention_max_distance") ? integer(c, path, "relative_attention_max_distance") : 128;
  vocab_size = integer(c, path, "vocab_size");
  if (layers <= 0 || decoder <= 0 || hidden <= 0 || heads <= 0 || kv <= 0 || ff <= 0 || vocab_size <= 0)
    TESSERA_CONFIG_FAIL(path, ": num_layers, num_decoder_layers, d_model, num_heads, d_kv, d_ff and vocab_size must ",
                        "be positive");
  const bool tied = boolean(c, path, "tie_word_embeddings", true);
  // transformers 5 names the d_model^-0.5 scaling of the decoder output; before, it came with tying.
  if (boolean(c, path, "scale_decoder_outputs", tied) != tied)
    TESSERA_CONFIG_FAIL(path, ": scale_decoder_outputs = ", !tied ? "true" : "false", " with tie_word_embeddings = ",
                        tied ? "true" : "false", " is not supported (Tessera scales exactly when the output is tied)");
  const double dropout = number(c, path, "dropout_rate", 0.1);
  return {
      "model.architecture=\"t5\"",
      "model.num_layers=" + std::to_string(layers),
      "model.num_decoder_layers=" + std::to_string(decoder),
      "model.hidden_size=" + std::to_string(hidden),
      "model.num_attention_heads=" + std::to_string(heads),
      "model.num_query_groups=" + std::to_string(heads),
      "model.kv_channels=" + std::to_string(kv),
      "model.ffn_hidden_size=" + std::to_string(ff),
      "model.relative_attention_num_buckets=" + std::to_string(buckets),
      "model.relative_attention_max_distance=" + std::to_string(distance),
      "model.seq_length=" + std::to_string(has(c, "n_positions") ? integer(c, path, "n_positions") : 512),
      "model.position_embedding_type=\"relative\"",
      "model.normalization=\"rmsnorm\"",
      "model.activation=\"" + activation + "\"",
      "model.add_bias_linear=false",
      std::string("model.untie_embeddings_and_output_weights=") + (tied ? "false" : "true"),
      "model.layernorm_epsilon=" + toml_number(number(c, path, "layer_norm_epsilon", 1e-6)),
      "model.hidden_dropout=" + toml_number(dropout),
      "model.attention_dropout=" + toml_number(dropout),
  };
}

nlohmann::json t5_hf_config(const TransformerConfig& m, int64_t vocab_size) {
  const bool g = gated(m), tied = !m.untie_embeddings_and_output_weights;
  return {
      {"architectures", {"T5ForConditionalGeneration"}},
      {"classifier_dropout", 0.0},
      {"d_ff", ffn(m)},
      {"d_kv", inner(m) / m.num_attention_heads},
      {"d_model", m.hidden_size},
      {"decoder_start_token_id", 0},
      {"dense_act_fn", g ? "gelu_new" : "relu"},
      {"dropout_rate", m.hidden_dropout},
      {"dtype", "float32"},
      {"eos_token_id", 1},
      {"feed_forward_proj", g ? "gated-gelu" : "relu"},
      {"initializer_factor", 1.0},
      {"is_encoder_decoder", true},
      {"is_gated_act", g},
      {"layer_norm_epsilon", m.layernorm_epsilon},
      {"model_type", "t5"},
      {"num_decoder_layers", decoder_layers(m)},
      {"num_heads", m.num_attention_heads},
      {"num_layers", m.num_layers},
      {"pad_token_id", 0},
      {"relative_attention_max_distance", m.relative_attention_max_distance},
      {"relative_attention_num_buckets", m.relative_attention_num_buckets},
      {"scale_decoder_outputs", tied},
      {"tie_word_embeddings", tied},
      {"use_cache", true},
      {"vocab_size", vocab_size},
  };
}

std::vector<CheckpointTensor> t5_checkpoint_tensors(const TransformerConfig& m, int64_t tp, int64_t vocab_size) {
  check_gpt_tensor_parallel(m, tp);
  const int64_t h = m.hidden_size, in = inner(m), f = ffn(m);
  const int64_t vocab = padded_vocab_size(vocab_size, m.make_vocab_size_divisible_by, tp);
  std::vector<CheckpointTensor> tensors;
  auto add = [&](const std::string& name, Shape shape, int axis, bool vocab_rows = false) {
    tensors.push_back({name, std::move(shape), axis, vocab_rows, "", {0}});
  };
  add("embedding.word_embeddings.weight", {vocab, h}, 0, true);
  for (const char* stack : {"encoder", "decoder"}) {
    const std::string s = stack;
    const bool decoder = s == "decoder";
    add(s + ".relative_attention_bias.weight", {m.relative_attention_num_buckets, m.num_attention_heads}, 1);
    const int64_t layers = decoder ? decoder_layers(m) : m.num_layers;
    for (int64_t l = 0; l < layers; ++l) {
      const std::string p = s + ".layers." + std::to_string(l) + ".";
      auto attention = [&](const std::string& a) {
        add(p + a + ".linear_q.weight", {in, h}, 0);
        add(p + a + ".linear_k.weight", {in, h}, 0);
        add(p + a + ".linear_v.weight", {in, h}, 0);
        add(p + a + ".linear_proj.weight", {h, in}, 1);
      };
      add(p + "input_layernorm.weight", {h}, -1);
      attention("self_attention");
      if (decoder) {
        add(p + "pre_cross_attn_layernorm.weight", {h}, -1);
        attention("cross_attention");
      }
      add(p + "pre_mlp_layernorm.weight", {h}, -1);
      add(p + "mlp.linear_fc1.weight", {gated(m) ? 2 * f : f, h}, 0);
      add(p + "mlp.linear_fc2.weight", {h, f}, 1);
    }
    add(s + ".final_layernorm.weight", {h}, -1);
  }
  if (m.untie_embeddings_and_output_weights) add("output_layer.weight", {vocab, h}, 0, true);
  return tensors;
}

}  // namespace tessera::models
