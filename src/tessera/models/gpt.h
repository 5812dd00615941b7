// GPT (GPT-2 architecture): learned absolute positions, pre-LN transformer blocks, final
// LayerNorm, output layer tied to the word embedding, cross entropy over the real vocabulary.
// The same class builds Llama-style decoders from the layer spec (transformer_config.h): RMSNorm,
// RoPE (position ids from the micro-batch) or ALiBi, SwiGLU, grouped-query attention, no linear
// biases and an untied output layer (output_layer.weight on the head's stage).
// A rank holds one or more model chunks (pipeline stages; several with interleaving). Each chunk
// has explicit forward and backward over one micro-batch; activations live in the caller's arena.
// GPTModel implements StageModel (stage_model.h), the interface pipeline schedules drive.
// Tensor parallel (parallel::TensorParallel, default TP = 1): vocabulary-parallel embedding and
// output layer (vocabulary padded to make_vocab_size_divisible_by x tp) with vocab-parallel cross
// entropy, heads and MLP split over TP ranks, and optional sequence parallelism (hidden states
// between the TP regions hold s*b/tp tokens).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tessera/nn/gpt_embedding.h"
#include "tessera/nn/norm.h"
#include "tessera/nn/transformer_layer.h"
#include "tessera/models/stage_model.h"
#include "tessera/models/transformer_config.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::models {

using GPTChunkLayout = ChunkLayout;

// One micro-batch's inputs, sequence-major ([s, b] flattened), shared by every chunk.
struct GPTInputs : MicroBatchInputs {
  Tensor ids, positions, labels, mask;  // i32, i32, i32, loss dtype (GPTModel::loss_dtype); [s*b] each
  int64_t seq = 0, batch = 0;
  double token_count = 0;               // sum of the loss mask (known on the host)
};

// What a chunk's forward saves for its backward (opaque to schedules).
struct GPTChunkActivations : ChunkActivations {
  Tensor input;  // the hidden state the chunk received (undefined on the embedding chunk)
  std::vector<nn::TransformerLayer::Saved> layers;
  nn::Norm::Saved final_ln;
  Tensor final_hidden;  // the output layer's input (all-gathered to every token under SP)
  Tensor logits, log_sum_exp;  // logits: this rank's vocabulary columns [s*b, V'/tp]
};

class GPTModel : public StageModel {
 public:
  // Rejects (ConfigError) a layer spec GPT does not implement: it builds LayerNorm or RMSNorm, causal
  // self-attention (multi-head, grouped-query or multi-query) with learned absolute, rotary, ALiBi
  // or no positions, a GeLU or SwiGLU MLP, with or without linear biases, a tied or untied output layer.
  GPTModel(const TransformerConfig& config, int64_t vocab_size, DType dtype, Device device,
           std::vector<GPTChunkLayout> chunks = {GPTChunkLayout{}}, const parallel::TensorParallel& tp = {});
  void initialize(uint64_t seed) override { store_.initialize(seed); }
  nn::ParameterStore& parameters() override { return store_; }
  const nn::ParameterStore& parameters() const override { return store_; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t padded_vocab_size() const override { return padded_vocab_; }
  const TransformerConfig& config() const { return config_; }
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  int num_chunks() const override { return static_cast<int>(chunks_.size()); }
  const GPTChunkLayout& chunk_layout(int chunk) const override { return chunks_.at(chunk).layout; }

  // StageModel: one hidden state [s*b, h] ([s*b/tp, h] under sequence parallelism) between stages.
  std::vector<Shape> stage_shapes(int64_t seq, int64_t batch) const override;
  std::unique_ptr<MicroBatchInputs> prepare_micro_batch(Arena& arena, const Tensor& tokens,
                                                        const Tensor& loss_mask) const override;
  std::unique_ptr<ChunkActivations> make_activations() const override;
  StageTensors forward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& input,
                             const nn::DropoutContext& dropout, ChunkActivations& acts) const override;
  LossSum stage_loss(Arena& arena, const MicroBatchInputs& in, ChunkActivations& acts) const override;
  StageTensors backward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& doutput,
                              double grad_scale, double token_count, const nn::DropoutContext& dropout,
                              const ChunkActivations& acts,
                              const std::function<void(int, int)>& grads_final = {}) const override;

  // Per-token losses, log-sum-exp and the loss mask: f32 on a GPU (the cross-entropy kernels
  // accumulate in f32), the parameter dtype on the CPU.
  DType loss_dtype() const;
  // tokens: i32 [b, s+1] (inputs then shifted labels); loss_mask: f32 [b, s]; both on the host.
  // The prepared, sequence-major inputs are uploaded to the arena's device.
  GPTInputs prepare(Arena& arena, const Tensor& tokens, const Tensor& loss_mask) const;

  // Chunk forward: input is the previous chunk's output [s*b, h] ([s*b/tp, h] under sequence
  // parallelism; undefined for the embedding chunk). Returns the output hidden state, or, for the
  // head chunk, this rank's logits [s*b, V'/tp].
  Tensor forward_chunk(int chunk, Arena& arena, const GPTInputs& in, const Tensor& input, const Tensor& key_padding_mask,
                       const nn::DropoutContext& dropout, GPTChunkActivations& acts) const;
  // Head chunk only: the masked loss sum of the forward just run.
  LossSum chunk_loss(Arena& arena, const GPTInputs& in, const GPTChunkActivations& acts) const;
  // Chunk backward: doutput is the gradient of the chunk's output (ignored on the head chunk,
  // which starts from d(loss_sum / token_count * grad_scale), token_count from chunk_loss). Adds
  // parameter gradients to the gradient buffer; returns d(input) (undefined for the embedding chunk).
  // grads_final (optional; the step's last backward): called with the parameter index range
  // [begin, end) of the head, each transformer layer and the embedding once its backward is queued.
  Tensor backward_chunk(int chunk, Arena& arena, const GPTInputs& in, const Tensor& doutput, double grad_scale,
                        double token_count, const nn::DropoutContext& dropout, const GPTChunkActivations& acts,
                        const std::function<void(int, int)>& grads_final = {}) const;

  // Whole-model conveniences (a single chunk with embedding and head).
  LossSum forward_backward(Arena& arena, const Tensor& tokens, const Tensor& loss_mask, double grad_scale,
                           const nn::DropoutContext& dropout);
  LossSum forward_loss(Arena& arena, const Tensor& tokens, const Tensor& loss_mask);  // no dropout, no grads
  // ids: i32 [b, s]; key_padding_mask: u8 [b, s] (1 = real token) or undefined; position_ids: i32
  // [b, s] or undefined (0..s-1). Returns logits [s, b, padded_vocab] (gathered over TP).
  Tensor forward_logits(Arena& arena, const Tensor& ids, const Tensor& key_padding_mask, const Tensor& position_ids);

 private:
  struct Chunk {
    GPTChunkLayout layout;
    std::vector<nn::TransformerLayer> layers;
    std::vector<std::pair<int, int>> layer_params;  // each layer's parameter index range in the store
  };
  void require_single_chunk(const char* what) const;

  TransformerConfig config_;
  parallel::TensorParallel tp_;
  int64_t vocab_size_, padded_vocab_;
  nn::ParameterStore store_;
  std::unique_ptr<nn::GPTEmbedding> embedding_;  // on the rank holding the embedding chunk
  std::unique_ptr<nn::Norm> final_layernorm_;  // on the rank holding the head chunk
  int output_weight_ = -1;  // the tied word embedding (or its copy on the last stage), or the untied output layer
  // Parameter index ranges in the store: the embedding's, and the head's (final LayerNorm and, on a
  // last stage without the embedding, output_layer.weight).
  std::pair<int, int> embedding_params_{0, 0}, head_params_{0, 0};
  std::vector<Chunk> chunks_;
};

}  // namespace tessera::models
