// Hugging Face Mixtral (MixtralForCausalLM, model_type "mixtral") <-> Tessera GPT built as a
// Llama-style decoder whose every MLP is a mixture of experts (model.num_experts, top-k softmax
// router, SwiGLU experts, no shared expert): tensor names and layouts, and the config.json fields.
// Attention, norms, embeddings and lm_head are Llama's (llama_hf_names.h). Each layer's
// block_sparse_moe.gate.weight [E, h] is Tessera's mlp.router.weight as is; expert e's w1 (gate)
// and w3 (up) are the rows of its fused SwiGLU mlp.experts.<e>.linear_fc1 (interleaved pairs, as
// gate_proj / up_proj are for Llama), w2 (down) is its linear_fc2.
// Routing: Mixtral takes softmax over all experts, the top k, and renormalises the k weights to sum
// 1; that equals Tessera's default router (moe_router_score_function = softmax,
// moe_router_pre_softmax = false: top-k of the logits, softmax over the k), which the import sets.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/models/gpt_hf_names.h"
#include "tessera/models/transformer_config.h"

namespace tessera::models {

// Every stored Mixtral tensor, in MixtralForCausalLM's (save_pretrained's) state-dict order.
std::vector<HfTensorName> mixtral_hf_names(const TransformerConfig& model);

// config.json of a Mixtral -> the Tessera [model] keys and the real vocabulary size. ConfigError
// naming the file and field for what Tessera cannot represent (Llama's refusals, and
// sliding_window shorter than the context, router_jitter_noise != 0, biases, a shared expert, ...).
std::vector<std::string> mixtral_model_keys_from_hf(const nlohmann::json& config, const std::string& path,
                                                    int64_t& vocab_size);
// The config.json HF's MixtralForCausalLM loads for a Tessera MoE GPT with vocab_size tokens.
nlohmann::json mixtral_hf_config(const TransformerConfig& model, int64_t vocab_size);

}  // namespace tessera::models
