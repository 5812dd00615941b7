// Hugging Face GPT-2 (GPT2LMHeadModel) <-> Tessera GPT: tensor names and how each tensor's layout
// differs, and the config.json fields. Conv1D weights are stored [in, out] by HF ([out, in] here);
// c_attn's columns are [q | k | v] in HF and per-head [q_h, k_h, v_h] rows here; wte has the real
// vocabulary's rows in HF and padded rows here. The tied lm_head is not stored (as save_pretrained).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/models/transformer_config.h"

namespace tessera::models {

// How a tensor's HF layout relates to Tessera's global layout.
enum class HfLayout {
  same,         // identical
  transposed,   // HF [in, out] = Tessera [out, in] transposed (Conv1D)
  qkv_weight,   // transposed, and HF columns [q | k | v] = Tessera rows grouped per head
  qkv_bias,     // HF [q | k | v] = Tessera grouped per head
  vocab_rows,   // HF has the real vocabulary's rows, Tessera the padded rows (zero beyond)
  // Fused tensors, rows of HF's tensors concatenated ([q; k; v], [gate; up]) then permuted:
  gqa_qkv_rows,  // HF rows [q (na d); k (ng d); v (ng d)] = Tessera rows per query group [q.. k v]
  swiglu_rows,   // HF rows [gate (f); up (f)] = Tessera rows (gate_j, up_j) interleaved
};

struct HfTensorName {
  std::string tessera;  // Megatron key
  std::string hf;       // HF key as save_pretrained writes it
  HfLayout layout = HfLayout::same;
  // A fused Tessera tensor is several HF tensors: this one is rows [row_begin, row_begin + rows) of
  // their concatenation in HF order (rows = 0: the whole tensor).
  int64_t row_begin = 0, rows = 0;
};

// Every stored GPT-2 tensor, in GPT2LMHeadModel's state-dict order.
std::vector<HfTensorName> gpt2_hf_names(const TransformerConfig& model);

// config.json of a GPT-2 -> the Tessera [model] keys ("model.key=value" overrides) and the real
// vocabulary size. ConfigError naming the file and field for what Tessera's GPT cannot represent.
std::vector<std::string> gpt2_model_keys_from_hf(const nlohmann::json& config, const std::string& path,
                                                 int64_t& vocab_size);
// The config.json HF's GPT2LMHeadModel loads for a Tessera GPT with vocab_size real tokens.
nlohmann::json gpt2_hf_config(const TransformerConfig& model, int64_t vocab_size);

}  // namespace tessera::models
