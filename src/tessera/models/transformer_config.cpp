#include "tessera/models/transformer_config.h"

#include "tessera/core/error.h"

namespace tessera::models {

Norm parse_norm(const std::string& name) {
  if (name == "layernorm") return Norm::layernorm;
  if (name == "rmsnorm") return Norm::rmsnorm;
  TESSERA_CONFIG_FAIL("model.normalization = '", name, "': allowed values are layernorm, rmsnorm");
}

PositionEmbedding parse_position_embedding(const std::string& name) {
  if (name == "learned_absolute") return PositionEmbedding::learned_absolute;
  if (name == "rope") return PositionEmbedding::rope;
  if (name == "alibi") return PositionEmbedding::alibi;
  if (name == "relative") return PositionEmbedding::relative;
  if (name == "none") return PositionEmbedding::none;
  TESSERA_CONFIG_FAIL("model.position_embedding_type = '", name,
                      "': allowed values are learned_absolute, rope, alibi, relative, none");
}

Mlp parse_mlp(const std::string& activation, int64_t num_experts) {
  if (num_experts > 0) return Mlp::moe;
  if (activation == "gelu") return Mlp::gelu;
  if (activation == "swiglu") return Mlp::swiglu;
  if (activation == "relu") return Mlp::relu;
  if (activation == "squared_relu") return Mlp::squared_relu;
  if (activation == "geglu") return Mlp::geglu;
  TESSERA_CONFIG_FAIL("model.activation = '", activation,
                      "': allowed values are gelu, swiglu, relu, squared_relu, geglu");
}

const char* name(Norm v) { return v == Norm::layernorm ? "layernorm" : "rmsnorm"; }
const char* name(AttentionMask v) { return v == AttentionMask::causal ? "causal" : "bidirectional"; }
const char* name(PositionEmbedding v) {
  switch (v) {
    case PositionEmbedding::learned_absolute: return "learned_absolute";
    case PositionEmbedding::rope: return "rope";
    case PositionEmbedding::alibi: return "alibi";
    case PositionEmbedding::relative: return "relative";
    case PositionEmbedding::none: return "none";
  }
  return "?";
}
const char* name(Mlp v) {
  switch (v) {
    case Mlp::gelu: return "gelu";
    case Mlp::swiglu: return "swiglu";
    case Mlp::relu: return "relu";
    case Mlp::squared_relu: return "squared_relu";
    case Mlp::moe: return "moe";
    case Mlp::geglu: return "geglu";
  }
  return "?";
}

LayerSpec decoder_layer_spec(const TransformerConfig& config) {
  LayerSpec spec;
  spec.norm = parse_norm(config.normalization);
  spec.self_attention = {AttentionMask::causal, AttentionInput::self,
                         parse_position_embedding(config.position_embedding_type)};
  spec.mlp = parse_mlp(config.activation, config.num_experts);
  spec.expert_mlp = parse_mlp(config.activation, 0);
  return spec;
}

}  // namespace tessera::models
