// Hugging Face Megatron-BERT (MegatronBertForPreTraining, model_type "megatron-bert") <-> Tessera
// BERT (models/bert.h): tensor names and layouts, the config.json fields, and the tensors a BERT
// checkpoint holds at a parallel layout. HF's nn.Linear weights are [out, in] as here; query, key
// and value are the rows of the fused linear_qkv (regrouped per head); the word embedding and the
// MLM output bias have the real vocabulary's rows in HF and padded rows here. The tied decoder
// weight (cls.predictions.decoder) is not stored (as save_pretrained).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/models/gpt_checkpoint_tensors.h"
#include "tessera/models/gpt_hf_names.h"
#include "tessera/models/transformer_config.h"

namespace tessera::models {

// Every stored Megatron-BERT tensor, in HF's state-dict order.
std::vector<HfTensorName> megatron_bert_hf_names(const TransformerConfig& model);

// config.json of a Megatron-BERT -> the Tessera [model] keys and the real vocabulary size;
// ConfigError naming the file and field for what Tessera cannot represent.
std::vector<std::string> megatron_bert_model_keys_from_hf(const nlohmann::json& config, const std::string& path,
                                                          int64_t& vocab_size);
// The config.json HF's MegatronBertForPreTraining loads for a Tessera BERT with vocab_size tokens.
nlohmann::json megatron_bert_hf_config(const TransformerConfig& model, int64_t vocab_size);

// Every tensor of the BERT `model` at a parallel layout (as gpt_checkpoint_tensors), in the order
// BertModel registers them.
std::vector<CheckpointTensor> bert_checkpoint_tensors(const TransformerConfig& model, int64_t tp,
                                                      const std::vector<std::vector<ChunkLayout>>& stage_chunks,
                                                      int64_t vocab_size);

}  // namespace tessera::models
