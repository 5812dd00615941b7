// Loading a Hugging Face GPT-2 checkpoint (config.json + safetensors, single file or sharded) into
// a GPTModel: Conv1D weights are transposed, c_attn's [q | k | v] columns are regrouped into
// Megatron's per-head [q_h, k_h, v_h] rows, and the word embedding is zero-padded to the padded vocabulary.
#pragma once
#include <string>

#include "tessera/models/gpt.h"

namespace tessera::models {

struct HfGpt2Config {
  TransformerConfig model;  // GPT-2 numerics; dropout from the file's resid/attn pdrop
  int64_t vocab_size = 0;
};

// dir holds config.json and model.safetensors (or model.safetensors.index.json).
HfGpt2Config read_hf_gpt2_config(const std::string& dir);
void load_hf_gpt2_weights(GPTModel& model, const std::string& dir);

}  // namespace tessera::models
