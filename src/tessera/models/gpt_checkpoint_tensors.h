// The tensors a GPT checkpoint holds under a given parallel layout, computed from the config alone
// (no model is built, so converters stay within bounded memory): each tensor's global shape, its
// tensor-parallel split axis and the pipeline stages that hold it. Mirrors GPTModel's parameters.
#pragma once
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/train/config.h"

namespace tessera::models {

struct CheckpointTensor {
  std::string name;       // Megatron key, e.g. "decoder.layers.3.mlp.linear_fc1.weight"
  Shape global_shape;     // vocabulary tensors: padded_vocab rows
  int split_axis = -1;    // axis split over tensor parallelism; -1: replicated
  bool vocab_rows = false;     // rows are (padded) vocabulary entries
  std::vector<int> stages;     // pipeline ranks holding it
};

// Every tensor of config's GPT at its parallel layout (tensor_model_parallel_size,
// pipeline_model_parallel_size, num_layers_per_virtual_pipeline_stage / pipeline_layer_split),
// in the order GPTModel registers them. ConfigError (naming the keys) when tensor parallelism does
// not divide the heads, query groups or ffn_hidden_size, or the layers do not fit the pipeline.
std::vector<CheckpointTensor> gpt_checkpoint_tensors(const train::Config& config, int64_t vocab_size);

// Checks that tensor parallelism divides the model (ConfigError naming the keys and values).
void check_gpt_tensor_parallel(const train::Config& config);

}  // namespace tessera::models
