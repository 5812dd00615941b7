// The last stage's logits of an evaluation, written for the user (tessera-train --eval-only
// --logits-file F): for every evaluated sample, in sample order, one JSON Lines row
//   {"sample": i, "input_ids": [s ids], "top_ids": [[k ids] per token], "top_logits": [[k] per token]}
// with the k largest logits over the whole vocabulary (merged over tensor-parallel ranks, padding
// columns excluded), gathered over data-parallel ranks as the Accelerate guide's return_logits with
// gather_across_data_parallel_groups. top_k = 0: the full vocabulary (up to kMaxFullVocabulary).
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

#include "tessera/models/token_loss.h"
#include "tessera/runtime/parallel_context.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::train {

class LogitsWriter {
 public:
  static constexpr int64_t kMaxFullVocabulary = 4096;
  // Collective over the last pipeline stage's ranks (the only ones that call add()); the output
  // rank (tensor and data rank 0 of the last stage) writes path. ConfigError for a bad top_k.
  LogitsWriter(const std::string& path, int64_t top_k, int64_t vocab_size, const parallel::TensorParallel& tp,
               parallel::ParallelContext& context);
  // One micro-batch's logits (this TP rank's vocabulary columns, [s*b, padded_vocab / tp],
  // sequence-major) and inputs; first_sample: the global index of the step's first sample and m the
  // micro-batch (DP rank d holds samples first_sample + (m * dp + d) * b + [0, b)).
  void add(int64_t first_sample, int64_t m, const Tensor& logits, const models::LossInputs& inputs);
  int64_t top_k() const { return k_; }

 private:
  int64_t k_, vocab_;
  parallel::TensorParallel tp_;
  parallel::ParallelContext& context_;
  bool writer_;
  std::ofstream out_;
};

}  // namespace tessera::train
