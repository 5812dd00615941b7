// TokenLoss: how the last pipeline stage turns a micro-batch's per-token cross-entropy losses into
// the training loss. The step's loss is
//     sum over the step's micro-batches and data-parallel ranks of loss_sum
//   / sum over the same micro-batches and ranks of denominator,
// so a loss that is a token mean (the default "lm" loss) is the same number whatever the parallel
// layout and micro-batch split. The denominator depends only on the inputs (tokens, loss mask), so
// the trainer knows the step's total before the first backward and scales gradients by it.
// Losses are registered by name (loss_registry.h) and chosen with training.loss.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/deferred_sum.h"

namespace tessera::models {

// One micro-batch's inputs as the data loader produced them, on the host, sample-major.
struct LossInputs {
  int64_t batch = 0, seq = 0;
  std::span<const int32_t> tokens;     // [batch, seq + 1]: inputs tokens[b, 0..seq), labels tokens[b, 1..seq]
  std::span<const float> loss_mask;    // [batch, seq]: 1 = the token's loss counts
  int32_t input(int64_t b, int64_t s) const { return tokens[static_cast<size_t>(b * (seq + 1) + s)]; }
  int32_t label(int64_t b, int64_t s) const { return tokens[static_cast<size_t>(b * (seq + 1) + s + 1)]; }
  float mask(int64_t b, int64_t s) const { return loss_mask[static_cast<size_t>(b * seq + s)]; }
};

// What forward() returns: the micro-batch's loss sum and named metric sums (each reported, like
// the loss, as its sum over the step divided by the step's denominator). The loss sum may still be
// on its way from the device (ops::masked_sum_deferred): the trainer reads it after the step.
struct LossTerms {
  ops::DeferredSum loss_sum = 0;
  std::vector<std::pair<std::string, double>> metric_sums;
};

class TokenLoss {
 public:
  virtual ~TokenLoss() = default;
  virtual std::string name() const = 0;
  // This micro-batch's share of the step's denominator (> 0 unless nothing in it counts).
  virtual double denominator(const LossInputs& inputs) const = 0;
  // token_losses: the per-token cross-entropy losses of the micro-batch, sequence-major (row
  // s * batch + b), [seq * batch], on the model's device (f32 on a GPU). Returns the loss sum and
  // writes d(loss_sum) / d(token loss) into dlosses (same shape, dtype and device). mask: the loss
  // mask in the same layout and dtype (already on the device). Temporaries go in the arena.
  virtual LossTerms forward(Arena& arena, const LossInputs& inputs, const Tensor& mask, const Tensor& token_losses,
                            const Tensor& dlosses) const = 0;
  // A loss whose d(loss_sum) / d(token loss) depends on the inputs and the mask alone (not on the
  // token losses) writes it into dlosses here, as forward() will, and returns true: the head can
  // then run the output layer's backward in the same pass as the cross entropy, a chunk of tokens
  // at a time, without keeping the logits (GPTModel::chunk_loss). The default returns false.
  virtual bool gradient_before_losses(Arena& /*arena*/, const LossInputs& /*inputs*/, const Tensor& /*mask*/,
                                      const Tensor& /*dlosses*/) const {
    return false;
  }
};

}  // namespace tessera::models
