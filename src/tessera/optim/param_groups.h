// The optimizer's view of one trainable parameter (f32 value + f32 main grad, both views into
// buffers the model owns, and whether weight decay applies) and Megatron's default decay rule.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::optim {

struct ParamEntry {
  std::string name;           // the model's parameter name, e.g. "decoder.layers.0.mlp.linear_fc1.weight"
  Tensor param;               // f32 (the fp32 main parameter)
  Tensor grad;                // f32 main grad, same shape as param
  bool weight_decay = true;   // false: the optimizer uses weight decay 0 for this entry
};

// Megatron's default no-weight-decay condition (megatron/core/optimizer _get_param_groups):
// no decay when the name ends with ".bias" or the parameter is 1-D (biases, LayerNorm / RMSNorm
// weights); every other parameter (matrices, embeddings, 0-D scalars) is decayed.
bool default_weight_decay(std::string_view name, const Shape& shape);

}  // namespace tessera::optim
