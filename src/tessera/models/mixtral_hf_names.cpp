#include "tessera/models/mixtral_hf_names.h"

#include "tessera/core/error.h"
#include "tessera/models/hf_config_fields.h"
#include "tessera/models/llama_hf_names.h"

namespace tessera::models {

std::vector<HfTensorName> mixtral_hf_names(const TransformerConfig& m) {
  const int64_t f = m.expert_ffn_hidden_size();
  return llama_family_hf_names(m, [&](std::vector<HfTensorName>& names, const std::string& t, const std::string& h) {
    names.push_back({t + "mlp.router.weight", h + "block_sparse_moe.gate.weight"});
    for (int64_t e = 0; e < m.num_experts; ++e) {
      const std::string te = t + "mlp.experts." + std::to_string(e) + ".";
      const std::string he = h + "block_sparse_moe.experts." + std::to_string(e) + ".";
      names.push_back({te + "linear_fc1.weight", he + "w1.weight", HfLayout::swiglu_rows, 0, f});  // gate
      names.push_back({te + "linear_fc2.weight", he + "w2.weight"});                               // down
      names.push_back({te + "linear_fc1.weight", he + "w3.weight", HfLayout::swiglu_rows, f, f});  // up
    }
  });
}

namespace {
using hf_config::boolean;
using hf_config::has;
using hf_config::integer;
using hf_config::number;
using hf_config::toml_number;
}  // namespace

std::vector<std::string> mixtral_model_keys_from_hf(const nlohmann::json& c, const std::string& path,
                                                    int64_t& vocab_size) {
  // Attention, norms, RoPE, embeddings: Llama's fields and refusals.
  std::vector<std::string> keys = llama_model_keys_from_hf(c, path, vocab_size);
  const int64_t experts = integer(c, path, "num_local_experts"), topk = integer(c, path, "num_experts_per_tok");
  if (experts < 1 || topk < 1 || topk > experts)
    TESSERA_CONFIG_FAIL(path, ": num_experts_per_tok = ", topk, " must be in [1, num_local_experts = ", experts, "]");
  const int64_t positions = integer(c, path, "max_position_embeddings");
  if (has(c, "sliding_window") && integer(c, path, "sliding_window") < positions)
    TESSERA_CONFIG_FAIL(path, ": sliding_window = ", integer(c, path, "sliding_window"),
                        " is not supported (sliding-window attention; null or >= max_position_embeddings = ", positions,
                        " is full causal attention)");
  if (number(c, path, "router_jitter_noise", 0.0) != 0.0)
    TESSERA_CONFIG_FAIL(path, ": router_jitter_noise = ", number(c, path, "router_jitter_noise", 0.0),
                        " is not supported (Tessera's router has no input jitter; use 0)");
  if (boolean(c, path, "attention_bias", false) || boolean(c, path, "mlp_bias", false))
    TESSERA_CONFIG_FAIL(path, ": attention_bias / mlp_bias = true is not supported for mixtral (it has no biases)");
  // Fields of other MoE families that would change the math if they were silently ignored.
  for (const char* key : {"shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts",
                          "moe_intermediate_size", "first_k_dense_replace", "decoder_sparse_step", "mlp_only_layers"})
    if (has(c, key))
      TESSERA_CONFIG_FAIL(path, ": field '", key, "' is not part of a Mixtral model (not supported by model_type mixtral)");
  if (has(c, "norm_topk_prob") && !boolean(c, path, "norm_topk_prob", true))
    TESSERA_CONFIG_FAIL(path, ": norm_topk_prob = false is not supported (Mixtral renormalises the top-k weights)");
  for (const std::string& extra : std::vector<std::string>{
           "model.num_experts=" + std::to_string(experts),
           "model.moe_router_topk=" + std::to_string(topk),
           "model.moe_ffn_hidden_size=" + std::to_string(integer(c, path, "intermediate_size")),
           "model.moe_router_score_function=\"softmax\"",
           "model.moe_router_pre_softmax=false",
           "model.moe_router_load_balancing_type=\"aux_loss\"",
           "model.moe_aux_loss_coeff=" + toml_number(number(c, path, "router_aux_loss_coef", 0.0)),
           "model.moe_z_loss_coeff=0.0",
           "model.moe_expert_capacity_factor=0.0",
           "model.moe_layer_freq=1",
       })
    keys.push_back(extra);
  return keys;
}

nlohmann::json mixtral_hf_config(const TransformerConfig& m, int64_t vocab_size) {
  return {
      {"architectures", {"MixtralForCausalLM"}},
      {"attention_dropout", m.attention_dropout},
      {"bos_token_id", 1},
      {"dtype", "float32"},
      {"eos_token_id", 2},
      {"head_dim", m.head_dim()},
      {"hidden_act", "silu"},
      {"hidden_size", m.hidden_size},
      {"initializer_range", m.init_method_std},
      {"intermediate_size", m.expert_ffn_hidden_size()},
      {"max_position_embeddings", m.max_position_embeddings},
      {"model_type", "mixtral"},
      {"num_attention_heads", m.num_attention_heads},
      {"num_experts_per_tok", m.moe_router_topk},
      {"num_hidden_layers", m.num_layers},
      {"num_key_value_heads", m.num_query_groups},
      {"num_local_experts", m.num_experts},
      {"output_router_logits", false},
      {"rms_norm_eps", m.layernorm_epsilon},
      {"rope_scaling", nullptr},
      {"rope_theta", m.rotary_base},
      {"router_aux_loss_coef", m.moe_aux_loss_coeff},
      {"router_jitter_noise", 0.0},
      {"sliding_window", nullptr},
      {"tie_word_embeddings", !m.untie_embeddings_and_output_weights},
      {"use_cache", true},
      {"vocab_size", vocab_size},
  };
}

}  // namespace tessera::models
