// Moving one tensor between its Hugging Face layout and Tessera's global layout (models::HfLayout):
// shapes and the element permutations (Conv1D transpose, QKV regrouping, vocabulary rows).
#pragma once
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/models/gpt_hf_names.h"

namespace tessera::convert {

struct HfLayoutContext {
  int64_t num_heads = 1;    // attention heads (QKV regrouping); GPT-2 has one query group per head
  int64_t vocab_size = 0;   // real vocabulary rows in the HF tensor
  int64_t num_query_groups = 0;  // gqa_qkv_rows: key/value heads (0: num_heads)
};

// The shape of HF tensor `n` (one part of a fused tensor: its rows of the HF-order concatenation).
Shape hf_part_shape(const models::HfTensorName& n, const Shape& global, const HfLayoutContext& ctx);

// The HF shape of a tensor whose Tessera global shape is `global`.
Shape hf_shape(models::HfLayout layout, const Shape& global, const HfLayoutContext& ctx);
// HF values (hf_shape elements) -> Tessera global values (numel(global) elements); padded
// vocabulary rows are zero.
void hf_to_tessera(models::HfLayout layout, const float* hf, const Shape& global, const HfLayoutContext& ctx,
                   float* out);
// Tessera global values -> HF values (hf_shape elements); padded vocabulary rows are dropped.
void tessera_to_hf(models::HfLayout layout, const float* global_values, const Shape& global,
                   const HfLayoutContext& ctx, float* out);

}  // namespace tessera::convert
