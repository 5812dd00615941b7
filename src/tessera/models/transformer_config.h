// TransformerConfig: the shape of a transformer model (the [model] section of a run's config),
// shared by every model family, and the layer spec it selects (which norm, attention and MLP a
// layer is built from), as Megatron-Core's TransformerConfig + ModuleSpec.
#pragma once
#include <cstdint>
#include <string>

namespace tessera::models {

// Defaults are the config schema's (train/config_schema.cpp; a unit test keeps them equal).
struct TransformerConfig {
  std::string architecture = "gpt";  // the model registry's key (model_registry.h)
  int64_t num_layers = 12, hidden_size = 768, num_attention_heads = 12, num_query_groups = 0, ffn_hidden_size = 0;
  int64_t seq_length = 1024, max_position_embeddings = 1024;
  // Encoder-decoder models (T5): seq_length is the encoder's, decoder_seq_length the decoder's.
  int64_t decoder_seq_length = 128;
  // T5: decoder layers (0: num_layers, HF's num_decoder_layers), the per-head width of q, k and v
  // (0: hidden_size / heads; HF's d_kv, Megatron's kv_channels) and the relative position buckets.
  int64_t num_decoder_layers = 0, kv_channels = 0;
  int64_t relative_attention_num_buckets = 32, relative_attention_max_distance = 128;
  std::string position_embedding_type = "learned_absolute", normalization = "layernorm", activation = "gelu";
  bool untie_embeddings_and_output_weights = false;
  // Rotary embedding (position_embedding_type = rope): base (HF rope_theta), the fraction of each
  // head's dims that rotate (Megatron's rotary_percent), pairs (2i, 2i+1) instead of (i, i+d/2).
  double rotary_base = 10000.0, rotary_percent = 1.0;
  bool rotary_interleaved = false;
  bool add_bias_linear = true;  // biases of the QKV, projection and MLP linears (Llama: false)
  // multihead | multiquery (the Accelerate guide's alias: multiquery = num_query_groups 1).
  std::string attention_head_type = "multihead";
  int64_t make_vocab_size_divisible_by = 128;
  // layernorm_epsilon is the epsilon of every norm (LayerNorm or RMSNorm); the config's
  // model.norm_epsilon (Megatron's name), when > 0, overrides it at load.
  double hidden_dropout = 0.1, attention_dropout = 0.1, layernorm_epsilon = 1e-5, init_method_std = 0.02;
  double norm_epsilon = 0.0;
  // Mixture of experts (num_experts > 0; docs/moe.md): Megatron's --num-experts, --moe-* flags.
  int64_t num_experts = 0, moe_router_topk = 2;
  int64_t moe_ffn_hidden_size = 0;  // 0: ffn_hidden_size
  std::string moe_router_load_balancing_type = "aux_loss";  // aux_loss | none
  double moe_aux_loss_coeff = 0.0, moe_z_loss_coeff = 0.0;
  std::string moe_router_score_function = "softmax";  // softmax | sigmoid
  bool moe_router_pre_softmax = false;
  double moe_expert_capacity_factor = 0.0;  // 0: dropless
  bool moe_pad_expert_input_to_capacity = false;
  int64_t moe_shared_expert_intermediate_size = 0;  // 0: no shared expert
  int64_t moe_layer_freq = 1;                       // layer i is MoE when i % moe_layer_freq == 0
  bool is_moe_layer(int64_t layer) const { return num_experts > 0 && layer % moe_layer_freq == 0; }
  int64_t expert_ffn_hidden_size() const { return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : ffn_hidden_size; }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Rotated dims per head under RoPE: head_dim x rotary_percent, rounded down to even.
  int64_t rotary_dim() const { return (static_cast<int64_t>(static_cast<double>(head_dim()) * rotary_percent) / 2) * 2; }
};

// What a transformer layer is built from. Every value has a name (the config's spelling); the
// families implement the combinations they support and reject the others with "not supported yet".
enum class Norm { layernorm, rmsnorm };
enum class AttentionMask { causal, bidirectional };
enum class AttentionInput { self, cross };  // cross: keys/values from the encoder's output
enum class PositionEmbedding { learned_absolute, rope, alibi, relative, none };
enum class Mlp { gelu, swiglu, relu, squared_relu, moe, geglu };

struct AttentionSpec {
  AttentionMask mask = AttentionMask::causal;
  AttentionInput input = AttentionInput::self;
  PositionEmbedding position = PositionEmbedding::learned_absolute;
};

struct LayerSpec {
  Norm norm = Norm::layernorm;
  AttentionSpec self_attention;
  bool has_cross_attention = false;  // decoder layers of an encoder-decoder model
  AttentionSpec cross_attention{AttentionMask::bidirectional, AttentionInput::cross};
  Mlp mlp = Mlp::gelu;
  // Mlp::moe: the activation of each expert's (and the shared expert's) FFN (model.activation).
  Mlp expert_mlp = Mlp::gelu;
};

// Parses the config's names (ConfigError naming model.<key> and the allowed values otherwise).
Norm parse_norm(const std::string& name);
PositionEmbedding parse_position_embedding(const std::string& name);
Mlp parse_mlp(const std::string& activation, int64_t num_experts);
const char* name(Norm v);
const char* name(AttentionMask v);
const char* name(PositionEmbedding v);
const char* name(Mlp v);

// The layer spec the config asks for (a decoder layer: causal self-attention). A family checks it
// with its own supported set.
LayerSpec decoder_layer_spec(const TransformerConfig& config);

}  // namespace tessera::models
