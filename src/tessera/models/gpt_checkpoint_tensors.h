// The tensors a GPT checkpoint holds under a given parallel layout, computed from the config alone
// (no model is built, so converters stay within bounded memory): each tensor's global shape, its
// tensor-parallel split axis and the pipeline stages that hold it. Mirrors GPTModel's parameters.
#pragma once
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/models/stage_model.h"
#include "tessera/models/transformer_config.h"

namespace tessera::models {

struct CheckpointTensor {
  std::string name;       // Megatron key, e.g. "decoder.layers.3.mlp.linear_fc1.weight"
  Shape global_shape;     // vocabulary tensors: padded_vocab rows
  int split_axis = -1;    // axis split over tensor parallelism; -1: replicated
  bool vocab_rows = false;     // rows are (padded) vocabulary entries
  std::string copy_of;         // non-empty: a copy of that tensor (the tied output layer of a last stage)
  std::vector<int> stages;     // pipeline ranks holding it
  int64_t expert = -1;         // a MoE expert's tensor: its global expert index (held by one EP rank)
};

// Every tensor of the GPT `model` at a parallel layout: tensor parallelism `tp` and, per pipeline
// stage, the chunks it holds (stage_chunks[stage], as the pipeline's layout gives them), in the
// order GPTModel registers them. ConfigError (naming the keys) when tensor parallelism does not
// divide the heads, query groups or ffn_hidden_size.
std::vector<CheckpointTensor> gpt_checkpoint_tensors(const TransformerConfig& model, int64_t tp,
                                                     const std::vector<std::vector<ChunkLayout>>& stage_chunks,
                                                     int64_t vocab_size);

// Checks that tensor parallelism divides the model (ConfigError naming the keys and values).
void check_gpt_tensor_parallel(const TransformerConfig& model, int64_t tp);

}  // namespace tessera::models
