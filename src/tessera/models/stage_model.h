// StageModel: what pipeline schedules (pipeline/) and the trainer see of a model, whatever its
// family. A rank holds one or more model chunks (pipeline stages; several with interleaving); each
// chunk runs an explicit forward and backward over one micro-batch, receiving from the previous
// stage and sending to the next the tensors stage_shapes() describes (one hidden state for a
// decoder-only model; an encoder-decoder model may pass two: the encoder output and the decoder
// hidden state). The last chunk computes the loss. Activations live in the caller's arena.
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/nn/dropout_context.h"
#include "tessera/nn/parameter_store.h"
#include "tessera/models/token_loss.h"

namespace tessera::models {

// A micro-batch's loss terms (token_loss.h): the step's loss is the sum of loss_sum over its
// micro-batches and data-parallel ranks over the same sum of denominator. loss_sum.value() waits
// for the device's part of it (LossTerms).
struct LossSum {
  ops::DeferredSum loss_sum = 0;
  double denominator = 0;  // the lm loss: the count of loss tokens
  std::vector<std::pair<std::string, double>> metric_sums;  // reported like the loss: sum / denominator
};
// total += part (metrics matched by name; a new name is appended).
inline void accumulate(LossSum& total, const LossSum& part) {
  total.loss_sum += part.loss_sum;
  total.denominator += part.denominator;
  for (const auto& metric : part.metric_sums) {  // no structured binding: clang 14 cannot capture one
    auto it = std::find_if(total.metric_sums.begin(), total.metric_sums.end(),
                           [&](const auto& m) { return m.first == metric.first; });
    if (it == total.metric_sums.end()) total.metric_sums.emplace_back(metric);
    else it->second += metric.second;
  }
}

// Which part of the network a chunk holds: the input embedding (first chunk of the first stage),
// layers [first_layer, first_layer + num_layers), and the head (last chunk of the last stage:
// final norm, output layer and loss).
struct ChunkLayout {
  bool has_embedding = true;
  bool has_head = true;
  int64_t first_layer = 0;
  int64_t num_layers = -1;  // -1: every layer
};

// One micro-batch as the data loader gives it, on the host: tokens i32 [b, s+1] (inputs, then the
// shifted labels), loss_mask f32 [b, s], position_ids i32 [b, s] (undefined: 0..s-1 in every
// sample; data.reset_position_ids restarts them after each end-of-document token), and
// document_ids i32 [b, s] (undefined: one document per sample; data.reset_attention_mask numbers
// the documents the end-of-document tokens end, and a token attends only within its document).
// Every pipeline stage is given the whole micro-batch (each prepares what its chunks need).
// BERT (models/bert.h) reads tokens i32 [b, s] (the inputs, no shift) and the fields after
// document_ids: labels i32 [b, s] (the original tokens at masked positions), token_types i32 [b, s],
// padding_mask u8 [b, s] (1 = a real token) and sentence_labels i32 [b] (1 = the pair was swapped).
// T5 (models/t5.h) reads tokens i32 [b, s] (the encoder's inputs, no shift), padding_mask u8 [b, s]
// (the encoder's), decoder_tokens i32 [b, sd] (the decoder's inputs: start token, then the target
// shifted right), labels i32 [b, sd] (the target), loss_mask f32 [b, sd] and decoder_padding_mask
// u8 [b, sd] (1 = a real decoder token); sd = model.decoder_seq_length.
struct MicroBatch {
  Tensor tokens, loss_mask, position_ids, document_ids;
  Tensor labels, token_types, padding_mask, sentence_labels;
  Tensor decoder_tokens, decoder_padding_mask;
};

// A family's estimate of the activation memory of one micro-batch on this rank (bytes), for the
// memory report printed at start (train/memory_report.h). Zero: the family gives none.
struct ActivationMemory {
  int64_t layers = 0;                  // transformer layers on this rank (all chunks)
  int64_t per_layer_none = 0;          // what one layer's forward keeps without recomputation
  int64_t per_layer_selective = 0;     // ... with selective recomputation
  int64_t per_layer_full = 0;          // ... in a fully recomputed run (its input only, per layer of a 1-layer run)
  int64_t kept_per_micro_batch = 0;    // everything a micro-batch's forward keeps on this rank, this run's recomputation
  int64_t kept_per_micro_batch_none = 0;  // the same without recomputation
  int64_t embedding_and_head = 0;      // of kept_per_micro_batch: embedding output, final norm, logits or their chunks' results, losses
  int64_t workspace = 0;               // transient: a recomputed run's forward again + its backward, a logits chunk
  // What preparing a micro-batch allocates in the same arena before its forward (ids, positions,
  // labels, loss masks, document ids): the trainer's first arena block holds it and
  // kept_per_micro_batch, so that the forward's last large tensor (the logits) does not spill into
  // a block of its own and abandon the first block's tail.
  int64_t inputs = 0;
  // kept_per_micro_batch is, byte for byte, what the forward allocates in its arena (a dense GPT,
  // checked by recompute_test); false where it is only a guide (MoE layers: routed token counts are
  // known after the router runs).
  bool exact = false;
};

// Mixture-of-experts router statistics of the training forwards on this rank's chunks, per model
// layer (global index; zeros for dense layers and layers of other stages): the load-balancing and
// z-losses (without coefficients) times each micro-batch's loss denominator, summed over
// micro-batches (over the step's denominator they are the micro-batch-weighted means the trainer
// logs), and the slots routed to each expert and those dropped over capacity. Empty: no MoE.
struct MoeStepStats {
  std::vector<double> aux_loss, z_loss, dropped;
  std::vector<std::vector<double>> routed;  // [layer][expert]
};

// The tensors passed between stages, in stage_shapes() order (gradients in the same order).
using StageTensors = std::vector<Tensor>;

// A micro-batch's prepared inputs and a chunk's saved activations: each family's own types.
struct MicroBatchInputs {
  virtual ~MicroBatchInputs() = default;
};
struct ChunkActivations {
  virtual ~ChunkActivations() = default;
};

class StageModel {
 public:
  virtual ~StageModel() = default;
  virtual nn::ParameterStore& parameters() = 0;
  virtual const nn::ParameterStore& parameters() const = 0;
  virtual void initialize(uint64_t seed) = 0;
  virtual int64_t vocab_size() const = 0;         // the tokenizer's (before padding)
  virtual int64_t padded_vocab_size() const = 0;  // rows of the (global) embedding and output tables
  virtual int num_chunks() const = 0;
  virtual const ChunkLayout& chunk_layout(int chunk) const = 0;
  // Shapes and dtype of the tensors a chunk sends to the next stage for a micro-batch of `batch`
  // sequences of `seq` tokens (and receives their gradients of).
  virtual std::vector<Shape> stage_shapes(int64_t seq, int64_t batch) const = 0;
  virtual DType stage_dtype() const { return parameters().dtype(); }
  // The loss the head computes from the per-token cross entropy (default: LmLoss).
  virtual void set_loss(std::shared_ptr<const TokenLoss> loss) = 0;
  virtual const TokenLoss& loss() const = 0;
  // Estimated activation memory of one micro-batch (see ActivationMemory); default: none given.
  virtual ActivationMemory activation_memory(int64_t /*seq*/, int64_t /*batch*/) const { return {}; }
  // Bytes held by the model's own scratch arenas so far (recomputation), beside the caller's arenas.
  virtual size_t scratch_peak_bytes() const { return 0; }
  // The router statistics since the last call (and resets them); empty for a dense model.
  virtual MoeStepStats take_moe_stats() { return {}; }

  virtual std::unique_ptr<MicroBatchInputs> prepare_micro_batch(Arena& arena, const MicroBatch& batch) const = 0;
  virtual std::unique_ptr<ChunkActivations> make_activations() const = 0;
  // Chunk forward: input from the previous stage (empty on the embedding chunk); returns what the
  // next stage receives (nothing is sent from the head chunk: what it returns is the family's own,
  // its logits come from stage_logits).
  virtual StageTensors forward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& input,
                                     const nn::DropoutContext& dropout, ChunkActivations& acts) const = 0;
  // Head chunk only, after its forward (evaluation's logits file): this rank's logits [s*b, V'/tp].
  // head_output is what forward_stage returned; the default returns its first tensor.
  virtual Tensor stage_logits(Arena& /*arena*/, const MicroBatchInputs& /*in*/, ChunkActivations& /*acts*/,
                              const StageTensors& head_output) const {
    return head_output.at(0);
  }
  // Head chunk only: the loss terms of the forward just run (the denominator is the loss's
  // denominator of the micro-batch's inputs). backward_grad_scale: the grad_scale the chunk's
  // backward_stage will get, when one follows (training); a family may run the output layer's
  // backward here, in the same pass over the logits as the loss (GPT's chunked output layer).
  virtual LossSum stage_loss(Arena& arena, const MicroBatchInputs& in, ChunkActivations& acts,
                             std::optional<double> backward_grad_scale) const = 0;
  // Chunk backward: doutput is the gradient of the chunk's output (ignored on the head chunk, which
  // starts from d(loss_sum * grad_scale); grad_scale carries 1 / the step's denominator). Adds parameter gradients to the store's
  // gradient buffer; returns d(input) (empty on the embedding chunk). grads_final (optional, the
  // step's last backward): called with each parameter index range [begin, end) once its gradients
  // are final.
  virtual StageTensors backward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& doutput,
                                      double grad_scale, const nn::DropoutContext& dropout,
                                      const ChunkActivations& acts,
                                      const std::function<void(int, int)>& grads_final = {}) const = 0;
};

}  // namespace tessera::models
