// StageModel: what pipeline schedules (pipeline/) and the trainer see of a model, whatever its
// family. A rank holds one or more model chunks (pipeline stages; several with interleaving); each
// chunk runs an explicit forward and backward over one micro-batch, receiving from the previous
// stage and sending to the next the tensors stage_shapes() describes (one hidden state for a
// decoder-only model; an encoder-decoder model may pass two: the encoder output and the decoder
// hidden state). The last chunk computes the loss. Activations live in the caller's arena.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/nn/dropout_context.h"
#include "tessera/nn/parameter_store.h"

namespace tessera::models {

struct LossSum {
  double loss_sum = 0;     // sum over tokens of mask * per-token loss
  double token_count = 0;  // sum of the loss mask
};

// Which part of the network a chunk holds: the input embedding (first chunk of the first stage),
// layers [first_layer, first_layer + num_layers), and the head (last chunk of the last stage:
// final norm, output layer and loss).
struct ChunkLayout {
  bool has_embedding = true;
  bool has_head = true;
  int64_t first_layer = 0;
  int64_t num_layers = -1;  // -1: every layer
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
  int64_t embedding_and_head = 0;      // of kept_per_micro_batch: embedding output, final norm, logits, losses
  int64_t workspace = 0;               // transient: a recomputed run's forward again + its backward, dlogits
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
  // Estimated activation memory of one micro-batch (see ActivationMemory); default: none given.
  virtual ActivationMemory activation_memory(int64_t /*seq*/, int64_t /*batch*/) const { return {}; }
  // Bytes held by the model's own scratch arenas so far (recomputation), beside the caller's arenas.
  virtual size_t scratch_peak_bytes() const { return 0; }

  // tokens: i32 [b, s+1] (inputs then shifted labels); loss_mask: f32 [b, s]; both on the host.
  virtual std::unique_ptr<MicroBatchInputs> prepare_micro_batch(Arena& arena, const Tensor& tokens,
                                                                const Tensor& loss_mask) const = 0;
  virtual std::unique_ptr<ChunkActivations> make_activations() const = 0;
  // Chunk forward: input from the previous stage (empty on the embedding chunk); returns what the
  // next stage receives (the head chunk returns its logits, which are not sent).
  virtual StageTensors forward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& input,
                                     const nn::DropoutContext& dropout, ChunkActivations& acts) const = 0;
  // Head chunk only: the masked loss sum of the forward just run.
  virtual LossSum stage_loss(Arena& arena, const MicroBatchInputs& in, ChunkActivations& acts) const = 0;
  // Chunk backward: doutput is the gradient of the chunk's output (ignored on the head chunk, which
  // starts from d(loss_sum / token_count * grad_scale)). Adds parameter gradients to the store's
  // gradient buffer; returns d(input) (empty on the embedding chunk). grads_final (optional, the
  // step's last backward): called with each parameter index range [begin, end) once its gradients
  // are final.
  virtual StageTensors backward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& doutput,
                                      double grad_scale, double token_count, const nn::DropoutContext& dropout,
                                      const ChunkActivations& acts,
                                      const std::function<void(int, int)>& grads_final = {}) const = 0;
};

}  // namespace tessera::models
