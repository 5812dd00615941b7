#include "tessera/convert/hf_family.h"

#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/pipeline/pipeline_layout.h"

namespace tessera::convert {

namespace {

void check_gpt2_exportable(const train::ModelConfig& m) {
  auto need = [](bool ok, const char* key, const std::string& value, const char* allowed) {
    if (!ok)
      TESSERA_CONFIG_FAIL("model.", key, " = ", value, " cannot be written as a Hugging Face GPT-2 (it needs ", allowed,
                          ")");
  };
  need(m.architecture == "gpt", "architecture", m.architecture, "gpt");
  need(m.position_embedding_type == "learned_absolute", "position_embedding_type", m.position_embedding_type,
       "learned_absolute");
  need(m.normalization == "layernorm", "normalization", m.normalization, "layernorm");
  need(m.activation == "gelu", "activation", m.activation, "gelu");
  need(!m.untie_embeddings_and_output_weights, "untie_embeddings_and_output_weights", "true", "false");
  need(m.add_bias_linear, "add_bias_linear", "false", "true");
  need(m.num_query_groups == m.num_attention_heads, "num_query_groups", std::to_string(m.num_query_groups),
       "num_query_groups = num_attention_heads");
  need(m.num_experts == 0, "num_experts", std::to_string(m.num_experts), "0");
}

void check_llama_exportable(const train::ModelConfig& m) {
  auto need = [](bool ok, const char* key, const std::string& value, const char* allowed) {
    if (!ok)
      TESSERA_CONFIG_FAIL("model.", key, " = ", value, " cannot be written as a Hugging Face Llama (it needs ", allowed,
                          ")");
  };
  need(m.architecture == "gpt", "architecture", m.architecture, "gpt");
  need(m.position_embedding_type == "rope", "position_embedding_type", m.position_embedding_type, "rope");
  need(!m.rotary_interleaved, "rotary_interleaved", "true", "false");
  need(m.normalization == "rmsnorm", "normalization", m.normalization, "rmsnorm");
  need(m.activation == "swiglu", "activation", m.activation, "swiglu");
  need(m.num_experts == 0, "num_experts", std::to_string(m.num_experts), "0");
}

// A Mixtral is a Llama-style GPT whose every layer is a MoE layer of SwiGLU experts with Mixtral's
// router (softmax over the top-k logits = softmax, top-k, renormalised) and no extras.
void check_mixtral_exportable(const train::ModelConfig& m) {
  auto need = [](bool ok, const char* key, const std::string& value, const char* allowed) {
    if (!ok)
      TESSERA_CONFIG_FAIL("model.", key, " = ", value, " cannot be written as a Hugging Face Mixtral (it needs ",
                          allowed, ")");
  };
  need(m.architecture == "gpt", "architecture", m.architecture, "gpt");
  need(m.num_experts > 0, "num_experts", std::to_string(m.num_experts), "> 0");
  need(m.position_embedding_type == "rope", "position_embedding_type", m.position_embedding_type, "rope");
  need(!m.rotary_interleaved, "rotary_interleaved", "true", "false");
  need(m.rotary_percent == 1.0, "rotary_percent", std::to_string(m.rotary_percent), "1.0");
  need(m.normalization == "rmsnorm", "normalization", m.normalization, "rmsnorm");
  need(m.activation == "swiglu", "activation", m.activation, "swiglu");
  need(!m.add_bias_linear, "add_bias_linear", "true", "false");
  need(m.moe_layer_freq == 1, "moe_layer_freq", std::to_string(m.moe_layer_freq), "1: every layer MoE");
  need(m.moe_shared_expert_intermediate_size == 0, "moe_shared_expert_intermediate_size",
       std::to_string(m.moe_shared_expert_intermediate_size), "0: no shared expert");
  need(m.moe_router_score_function == "softmax", "moe_router_score_function", m.moe_router_score_function, "softmax");
  need(!m.moe_router_pre_softmax, "moe_router_pre_softmax", "true", "false: Mixtral renormalises the top-k weights");
  need(m.moe_expert_capacity_factor == 0.0, "moe_expert_capacity_factor", std::to_string(m.moe_expert_capacity_factor),
       "0: dropless");
}

// GPT's checkpoint tensors at config's layout: the pipeline's chunks of every stage.
std::vector<models::CheckpointTensor> gpt_tensors_at_layout(const train::Config& config, int64_t vocab_size) {
  const int pp = static_cast<int>(config.parallel.pipeline_model_parallel_size);
  if (pp < 1) TESSERA_CONFIG_FAIL("parallel.pipeline_model_parallel_size = ", pp, " must be positive");
  std::vector<std::vector<models::ChunkLayout>> stage_chunks;
  for (int stage = 0; stage < pp; ++stage)
    stage_chunks.push_back(parallel::pipeline_chunk_layouts(config.model.num_layers, config.parallel, pp, stage));
  return models::gpt_checkpoint_tensors(config.model, config.parallel.tensor_model_parallel_size, stage_chunks,
                                        vocab_size);
}

void check_megatron_bert_exportable(const train::ModelConfig& m) {
  if (m.architecture != "bert")
    TESSERA_CONFIG_FAIL("model.architecture = ", m.architecture,
                        " cannot be written as a Hugging Face Megatron-BERT (it needs bert)");
}

std::vector<models::CheckpointTensor> bert_tensors_at_layout(const train::Config& config, int64_t vocab_size) {
  const int pp = static_cast<int>(config.parallel.pipeline_model_parallel_size);
  if (pp < 1) TESSERA_CONFIG_FAIL("parallel.pipeline_model_parallel_size = ", pp, " must be positive");
  std::vector<std::vector<models::ChunkLayout>> stage_chunks;
  for (int stage = 0; stage < pp; ++stage)
    stage_chunks.push_back(parallel::pipeline_chunk_layouts(config.model.num_layers, config.parallel, pp, stage));
  return models::bert_checkpoint_tensors(config.model, config.parallel.tensor_model_parallel_size, stage_chunks,
                                         vocab_size);
}

void check_t5_exportable(const train::ModelConfig& m) {
  if (m.architecture != "t5")
    TESSERA_CONFIG_FAIL("model.architecture = ", m.architecture, " cannot be written as a Hugging Face T5 (it needs t5)");
}

std::vector<models::CheckpointTensor> t5_tensors_at_layout(const train::Config& config, int64_t vocab_size) {
  if (config.parallel.pipeline_model_parallel_size != 1)
    TESSERA_CONFIG_FAIL("parallel.pipeline_model_parallel_size = ", config.parallel.pipeline_model_parallel_size,
                        " is not supported by model.architecture = t5 (Megatron's encoder/decoder split, ",
                        "pipeline_model_parallel_split_rank, is not supported)");
  return models::t5_checkpoint_tensors(config.model, config.parallel.tensor_model_parallel_size, vocab_size);
}

}  // namespace

const std::vector<HfFamily>& hf_families() {
  static const std::vector<HfFamily> families = {
      {"gpt2", "gpt", models::gpt2_model_keys_from_hf, models::gpt2_hf_names, models::gpt2_hf_config,
       check_gpt2_exportable, gpt_tensors_at_layout},
      {"llama", "gpt", models::llama_model_keys_from_hf, models::llama_hf_names, models::llama_hf_config,
       check_llama_exportable, gpt_tensors_at_layout},
      {"mixtral", "gpt", models::mixtral_model_keys_from_hf, models::mixtral_hf_names, models::mixtral_hf_config,
       check_mixtral_exportable, gpt_tensors_at_layout},
      {"megatron-bert", "bert", models::megatron_bert_model_keys_from_hf, models::megatron_bert_hf_names,
       models::megatron_bert_hf_config, check_megatron_bert_exportable, bert_tensors_at_layout},
      {"t5", "t5", models::t5_model_keys_from_hf, models::t5_hf_names, models::t5_hf_config, check_t5_exportable,
       t5_tensors_at_layout},
  };
  return families;
}

std::string supported_model_types() {
  std::string list;
  for (const HfFamily& f : hf_families()) list += (list.empty() ? "" : ", ") + f.model_type;
  return list;
}

const HfFamily& hf_family(const std::string& model_type, const std::string& where) {
  for (const HfFamily& f : hf_families())
    if (f.model_type == model_type) return f;
  TESSERA_CONFIG_FAIL(where, ": model_type '", model_type, "' is not supported; supported: ", supported_model_types());
}

const HfFamily& hf_family_for_architecture(const std::string& architecture, const std::string& where) {
  for (const HfFamily& f : hf_families())
    if (f.architecture == architecture) return f;
  TESSERA_CONFIG_FAIL(where, ": model.architecture '", architecture,
                      "' has no Hugging Face export; supported model_types: ", supported_model_types());
}

const HfFamily& hf_family_for_model(const train::ModelConfig& model, const std::string& where) {
  std::string objections;
  for (const HfFamily& f : hf_families()) {
    if (f.architecture != model.architecture) continue;
    try {
      f.check_exportable(model);
      return f;
    } catch (const ConfigError& e) {
      objections += std::string(objections.empty() ? "" : "; ") + f.model_type + ": " + e.what();
    }
  }
  if (objections.empty()) hf_family_for_architecture(model.architecture, where);  // throws: no family at all
  TESSERA_CONFIG_FAIL(where, ": this model has no Hugging Face form (", objections, ")");
}

nlohmann::json read_hf_config_json(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "config.json";
  std::ifstream in(path);
  if (!in) TESSERA_CONFIG_FAIL("cannot open Hugging Face config '", path.string(), "' (is '", dir, "' an HF model folder?)");
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_object()) TESSERA_CONFIG_FAIL(path.string(), ": not a JSON object");
    return j;
  } catch (const nlohmann::json::exception& e) {
    TESSERA_CONFIG_FAIL(path.string(), ": invalid JSON: ", e.what());
  }
}

}  // namespace tessera::convert
