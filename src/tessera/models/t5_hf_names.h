// Hugging Face T5 (T5ForConditionalGeneration, model_type "t5"; T5 v1.0 with relu and v1.1 / flan
// with gated-gelu) <-> Tessera T5 (models/t5.h): tensor names and layouts, the config.json fields,
// and the tensors a T5 checkpoint holds at a tensor-parallel layout. HF's nn.Linear weights are
// [out, in] as here; q, k, v and o are separate in both; a gated feed-forward's wi_0 (the GeLU side)
// and wi_1 are the interleaved rows of linear_fc1 (as SwiGLU's gate and up); the shared embedding
// and an untied lm_head have the real vocabulary's rows in HF and padded rows here; the relative
// attention bias lives in block 0 of each stack in HF and once per stack here. The tied copies
// encoder.embed_tokens / decoder.embed_tokens are not stored (as save_pretrained).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/models/gpt_checkpoint_tensors.h"
#include "tessera/models/gpt_hf_names.h"
#include "tessera/models/transformer_config.h"

namespace tessera::models {

// Every stored T5 tensor, in HF's state-dict order.
std::vector<HfTensorName> t5_hf_names(const TransformerConfig& model);

// config.json of a T5 -> the Tessera [model] keys and the real vocabulary size; ConfigError naming
// the file and field for what Tessera cannot represent.
std::vector<std::string> t5_model_keys_from_hf(const nlohmann::json& config, const std::string& path,
                                               int64_t& vocab_size);
// The config.json HF's T5ForConditionalGeneration loads for a Tessera T5 with vocab_size tokens.
nlohmann::json t5_hf_config(const TransformerConfig& model, int64_t vocab_size);

// Every tensor of the T5 `model` at tensor parallelism tp (one pipeline stage), in the order
// T5Model registers them.
std::vector<CheckpointTensor> t5_checkpoint_tensors(const TransformerConfig& model, int64_t tp, int64_t vocab_size);

}  // namespace tessera::models
