// The model families tessera-convert and tessera-train understand in Hugging Face form, keyed by
// config.json's model_type. A family row says which Tessera architecture it becomes, how its
// config.json maps to [model] keys and back, and its tensor-name map (which lives beside the model,
// e.g. models/gpt_hf_names.h). Llama, Mixtral, Megatron-BERT and T5 add a row here with their name map.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/models/bert_hf_names.h"
#include "tessera/models/gpt_checkpoint_tensors.h"
#include "tessera/models/gpt_hf_names.h"
#include "tessera/models/llama_hf_names.h"
#include "tessera/models/mixtral_hf_names.h"
#include "tessera/models/t5_hf_names.h"
#include "tessera/train/config.h"

namespace tessera::convert {

struct HfFamily {
  std::string model_type;     // config.json "model_type"
  std::string architecture;   // Tessera model.architecture
  // config.json -> "model.key=value" overrides and the real vocabulary size (ConfigError naming path).
  std::vector<std::string> (*model_keys)(const nlohmann::json& config, const std::string& path, int64_t& vocab_size);
  // The stored tensors, Tessera name <-> HF name and layout, in HF's state-dict order.
  std::vector<models::HfTensorName> (*tensor_names)(const train::ModelConfig& model);
  nlohmann::json (*hf_config)(const train::ModelConfig& model, int64_t vocab_size);
  // Checks that a Tessera config is representable in this family (ConfigError naming the key).
  void (*check_exportable)(const train::ModelConfig& model);
  // The Tessera checkpoint's tensors at config's parallel layout (the architecture's table).
  std::vector<models::CheckpointTensor> (*checkpoint_tensors)(const train::Config& config, int64_t vocab_size);
};

const std::vector<HfFamily>& hf_families();
std::string supported_model_types();  // "gpt2" (comma-separated)
// The family of a model_type; ConfigError naming `where`, the model_type and the supported list.
const HfFamily& hf_family(const std::string& model_type, const std::string& where);
// The family a Tessera architecture exports to; ConfigError when none.
const HfFamily& hf_family_for_architecture(const std::string& architecture, const std::string& where);

// The family a Tessera model config exports to: the first of its architecture's families whose
// check_exportable accepts it (GPT: gpt2, or llama for a Llama-style config); ConfigError naming
// every candidate's objection otherwise.
const HfFamily& hf_family_for_model(const train::ModelConfig& model, const std::string& where);

// An HF model directory's config.json, parsed (ConfigError naming the file when missing or invalid).
nlohmann::json read_hf_config_json(const std::string& dir);

}  // namespace tessera::convert
