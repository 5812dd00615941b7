// Hugging Face Llama (LlamaForCausalLM, model_type "llama") <-> Tessera GPT built as a Llama-style
// decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied or tied output layer, no biases):
// tensor names and layouts, and the config.json fields. HF's nn.Linear weights are [out, in] as
// here (no transposes); q_proj, k_proj, v_proj are the rows of the fused linear_qkv (regrouped per
// query group), gate_proj and up_proj those of the fused SwiGLU linear_fc1 (interleaved pairs).
// RoPE needs no q/k permutation: HF Llama and Tessera both rotate pairs (i, i + d/2).
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/models/gpt_hf_names.h"
#include "tessera/models/transformer_config.h"

namespace tessera::models {

// A Llama-family decoder's tensors in state-dict order (embedding, per layer: input norm, attention,
// post-attention norm, then the MLP's tensors from mlp_names(names, tessera_prefix, hf_prefix),
// final norm, output layer): Llama's dense SwiGLU and Mixtral's experts differ only there.
using LlamaMlpNames =
    std::function<void(std::vector<HfTensorName>& names, const std::string& tessera_layer, const std::string& hf_layer)>;
std::vector<HfTensorName> llama_family_hf_names(const TransformerConfig& model, const LlamaMlpNames& mlp_names);

// Every stored Llama tensor, in LlamaForCausalLM's state-dict order.
std::vector<HfTensorName> llama_hf_names(const TransformerConfig& model);

// config.json of a Llama -> the Tessera [model] keys ("model.key=value" overrides) and the real
// vocabulary size. ConfigError naming the file and field for what Tessera cannot represent
// (rope_scaling other than default, head_dim != hidden_size / heads, attention_bias != mlp_bias, ...).
std::vector<std::string> llama_model_keys_from_hf(const nlohmann::json& config, const std::string& path,
                                                  int64_t& vocab_size);
// The config.json HF's LlamaForCausalLM loads for a Tessera Llama-style GPT with vocab_size tokens.
nlohmann::json llama_hf_config(const TransformerConfig& model, int64_t vocab_size);

}  // namespace tessera::models
