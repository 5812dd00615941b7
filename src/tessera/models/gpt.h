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
#include "tessera/nn/recompute.h"
#include "tessera/nn/transformer_layer.h"
#include "tessera/models/stage_model.h"
#include "tessera/models/transformer_config.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::models {

using GPTChunkLayout = ChunkLayout;

// One micro-batch's inputs, sequence-major ([s, b] flattened), shared by every chunk.
struct GPTInputs : MicroBatchInputs {
  Tensor ids, positions, labels, mask;  // i32, i32, i32, loss dtype (GPTModel::loss_dtype); [s*b] each
  Tensor document_ids;  // i32 [b, s] (batch-major, as the attention reads it) or undefined: no document masks
  int64_t seq = 0, batch = 0;
  double denominator = 0;                // the loss's denominator of these inputs (known on the host)
  std::vector<int32_t> host_tokens;      // the micro-batch as loaded, [b, s+1] and [b, s]: what the
  std::vector<float> host_loss_mask;     // loss (token_loss.h) reads
  LossInputs loss_inputs() const { return {batch, seq, host_tokens, host_loss_mask}; }
};

// What a chunk's forward saves for its backward (opaque to schedules).
struct GPTChunkActivations : ChunkActivations {
  Tensor input;  // the hidden state the chunk received (undefined on the embedding chunk)
  nn::LayerStackSaved layers;  // the chunk's transformer layers (nn/recompute.h)
  nn::Norm::Saved final_ln;
  Tensor final_hidden;  // the output layer's input (all-gathered to every token under SP)
  // The logits kept whole (this rank's vocabulary columns [s*b, V'/tp]) and their log-sum-exp: only
  // where output_logits ran (evaluation's logits file) or a loss needs the token losses before its
  // gradient; a training chunk_loss otherwise runs the output layer's backward itself (dhidden).
  Tensor logits, log_sum_exp;
  Tensor dlosses;  // d(loss_sum) / d(per-token loss), written by the loss (chunk_loss)
  Tensor dhidden;  // d(loss_sum * head_grad_scale) / d(final_hidden), from chunk_loss's backward pass
  double head_grad_scale = 0;
};

// Generation: every layer's KV cache on this rank, per chunk (GPTModel::allocate_kv_cache).
struct GPTKvCache {
  std::vector<std::vector<nn::KvCacheSlot>> chunks;  // [chunk][layer]
  int64_t batch = 0, capacity = 0;
  // On a GPU: i32 [1], the cached-token count every layer's kernel reads; the caller writes it before
  // each forward_cached (the same value as `past`), so one captured CUDA graph serves every step.
  Tensor past_device;
};

class GPTModel : public StageModel {
 public:
  // Rejects (ConfigError) a layer spec GPT does not implement: it builds LayerNorm or RMSNorm, causal
  // self-attention (multi-head, grouped-query or multi-query) with learned absolute, rotary, ALiBi
  // or no positions, a GeLU or SwiGLU MLP, with or without linear biases, a tied or untied output layer.
  GPTModel(const TransformerConfig& config, int64_t vocab_size, DType dtype, Device device,
           std::vector<GPTChunkLayout> chunks = {GPTChunkLayout{}}, const parallel::TensorParallel& tp = {},
           const nn::ExpertParallel& ep = {});
  void initialize(uint64_t seed) override { store_.initialize(seed); }
  nn::ParameterStore& parameters() override { return store_; }
  const nn::ParameterStore& parameters() const override { return store_; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t padded_vocab_size() const override { return padded_vocab_; }
  const TransformerConfig& config() const { return config_; }
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  void set_loss(std::shared_ptr<const TokenLoss> loss) override;
  const TokenLoss& loss() const override { return *loss_; }
  int num_chunks() const override { return static_cast<int>(chunks_.size()); }
  // Activation recomputation of every chunk's layers (default: none); ConfigError naming
  // parallel.recompute_num_layers when a full recomputation asks for more layers than a chunk holds.
  void set_recompute(const nn::RecomputeConfig& config);
  const nn::LayerStack& layer_stack() const { return *layer_stack_; }
  // gpt_memory.cpp: the bytes each allocation of forward_chunk makes, summed per layer.
  ActivationMemory activation_memory(int64_t seq, int64_t batch) const override;
  size_t scratch_peak_bytes() const override { return layer_stack_->scratch_peak_bytes(); }
  MoeStepStats take_moe_stats() override;
  const GPTChunkLayout& chunk_layout(int chunk) const override { return chunks_.at(chunk).layout; }

  // StageModel: one hidden state [s*b, h] ([s*b/tp, h] under sequence parallelism) between stages.
  std::vector<Shape> stage_shapes(int64_t seq, int64_t batch) const override;
  std::unique_ptr<MicroBatchInputs> prepare_micro_batch(Arena& arena, const MicroBatch& batch) const override;
  std::unique_ptr<ChunkActivations> make_activations() const override;
  StageTensors forward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& input,
                             const nn::DropoutContext& dropout, ChunkActivations& acts) const override;
  Tensor stage_logits(Arena& arena, const MicroBatchInputs& in, ChunkActivations& acts,
                      const StageTensors& head_output) const override;  // output_logits
  LossSum stage_loss(Arena& arena, const MicroBatchInputs& in, ChunkActivations& acts,
                     std::optional<double> backward_grad_scale) const override;
  StageTensors backward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& doutput,
                              double grad_scale, const nn::DropoutContext& dropout, const ChunkActivations& acts,
                              const std::function<void(int, int)>& grads_final = {}) const override;

  // Per-token losses, log-sum-exp and the loss mask: f32 on a GPU (the cross-entropy kernels
  // accumulate in f32), the parameter dtype on the CPU.
  DType loss_dtype() const;
  // The prepared, sequence-major inputs, uploaded to the arena's device.
  GPTInputs prepare(Arena& arena, const MicroBatch& batch) const;

  // Chunk forward: input is the previous chunk's output [s*b, h] ([s*b/tp, h] under sequence
  // parallelism; undefined for the embedding chunk). Returns the output hidden state, or, for the
  // head chunk, the output layer's input (acts.final_hidden): the logits come from output_logits or,
  // a chunk of tokens at a time, from chunk_loss.
  Tensor forward_chunk(int chunk, Arena& arena, const GPTInputs& in, const Tensor& input, const Tensor& key_padding_mask,
                       const nn::DropoutContext& dropout, GPTChunkActivations& acts) const;
  // Head chunk only, after its forward: this rank's logits [s*b, V'/tp], kept in acts.logits.
  Tensor output_logits(Arena& arena, GPTChunkActivations& acts) const;
  // Head chunk only: the loss terms of the forward just run (the loss's, token_loss.h). The output
  // layer and the cross entropy run over output_chunk_rows() tokens at a time, the logits of one
  // chunk alive at once (in the layer stack's backward scratch, which a layer's backward sizes
  // anyway). With backward_grad_scale (the grad_scale backward_chunk will get), each chunk's
  // cross-entropy gradient and the output layer's backward follow at once: the output weight's
  // gradient accumulates here and backward_chunk starts from acts.dhidden. The logits are kept
  // whole instead where output_logits already ran or the loss needs the token losses before its
  // gradient (TokenLoss::gradient_before_losses).
  LossSum chunk_loss(Arena& arena, const GPTInputs& in, const GPTChunkActivations& acts,
                     std::optional<double> backward_grad_scale) const;
  // Tokens per output-layer chunk for a micro-batch of `tokens` (all of them when that fits), in
  // even chunks: as many as fit in layer_bytes (one layer's forward activations, so the chunk's
  // logits fit the backward scratch a layer's backward sizes anyway), or set_output_chunk_rows's
  // (0: that rule, the default).
  int64_t output_chunk_rows(int64_t tokens, int64_t layer_bytes) const;
  void set_output_chunk_rows(int64_t rows) { output_chunk_rows_ = rows; }
  // Chunk backward: doutput is the gradient of the chunk's output (ignored on the head chunk,
  // which starts from d(loss_sum * grad_scale), the loss sum of chunk_loss). Adds
  // parameter gradients to the gradient buffer; returns d(input) (undefined for the embedding chunk).
  // grads_final (optional; the step's last backward): called with the parameter index range
  // [begin, end) of the head, each transformer layer and the embedding once its backward is queued.
  Tensor backward_chunk(int chunk, Arena& arena, const GPTInputs& in, const Tensor& doutput, double grad_scale,
                        const nn::DropoutContext& dropout, const GPTChunkActivations& acts,
                        const std::function<void(int, int)>& grads_final = {}) const;

  // Whole-model conveniences (a single chunk with embedding and head). forward_backward adds the
  // gradients of grad_scale * loss_sum / denominator (the micro-batch's own loss).
  LossSum forward_backward(Arena& arena, const Tensor& tokens, const Tensor& loss_mask, double grad_scale,
                           const nn::DropoutContext& dropout);
  LossSum forward_loss(Arena& arena, const Tensor& tokens, const Tensor& loss_mask);  // no dropout, no grads
  // ids: i32 [b, s]; key_padding_mask: u8 [b, s] (1 = real token) or undefined; position_ids: i32
  // [b, s] or undefined (0..s-1). Returns logits [s, b, padded_vocab] (gathered over TP).
  Tensor forward_logits(Arena& arena, const Tensor& ids, const Tensor& key_padding_mask, const Tensor& position_ids);

  // Generation. The KV cache of this rank's layers for `batch` sequences of up to `capacity` tokens,
  // allocated once in `arena` (model dtype, arena device).
  GPTKvCache allocate_kv_cache(Arena& arena, int64_t batch, int64_t capacity) const;
  // Chunk forward of t new tokens per sequence at cache indices [past, past + t) (no dropout). The
  // embedding chunk reads ids and positions (i32 [t*b], sequence-major, on the arena's device);
  // another chunk reads `input` [t*b, h] from the previous stage. Every chunk of a RoPE model needs
  // positions (its layers rotate q and k by them). key_mask: u8 [b, capacity] (1 =
  // real token) on the arena's device. Returns the hidden state [t*b, h], or, on the head chunk, the
  // logits gathered over TP, [rows, padded_vocab] with rows the last token's b rows (last_only) or
  // all t*b rows.
  Tensor forward_cached(int chunk, Arena& arena, const Tensor& ids, const Tensor& positions, const Tensor& input,
                        const Tensor& key_mask, const GPTKvCache& cache, int64_t past, int64_t tokens,
                        bool last_only) const;

 private:
  struct Chunk {
    GPTChunkLayout layout;
    std::vector<nn::TransformerLayer> layers;
    std::vector<std::pair<int, int>> layer_params;  // each layer's parameter index range in the store
  };
  void require_single_chunk(const char* what) const;
  // chunk_loss's pass over the output layer: per chunk of rows the logits, the cross entropy into
  // losses and, with dlosses_scaled defined, its gradient and the output layer's backward.
  void output_layer_pass(const GPTInputs& in, GPTChunkActivations& acts, const Tensor& losses,
                         const Tensor& dlosses_scaled) const;
  // d(loss_sum * grad_scale) / d(token loss): the loss's dlosses times grad_scale, in the arena.
  Tensor scaled_dlosses(Arena& arena, const GPTChunkActivations& acts, double grad_scale) const;
  // The first vocabulary column of this tensor-parallel rank's share of the output layer.
  int64_t vocab_start_of_rank() const { return tp_.rank * (padded_vocab_ / tp_.size); }
  void record_moe_stats(const Chunk& chunk, const GPTInputs& in, const GPTChunkActivations& acts) const;

  TransformerConfig config_;
  parallel::TensorParallel tp_;
  int64_t vocab_size_, padded_vocab_;
  nn::ParameterStore store_;
  std::unique_ptr<nn::GPTEmbedding> embedding_;  // on the rank holding the embedding chunk
  std::unique_ptr<nn::Norm> final_layernorm_;  // on the rank holding the head chunk
  std::shared_ptr<const TokenLoss> loss_;
  int output_weight_ = -1;  // the tied word embedding (or its copy on the last stage), or the untied output layer
  // Parameter index ranges in the store: the embedding's, and the head's (final LayerNorm and, on a
  // last stage without the embedding, output_layer.weight).
  std::pair<int, int> embedding_params_{0, 0}, head_params_{0, 0};
  std::vector<Chunk> chunks_;
  std::unique_ptr<nn::LayerStack> layer_stack_;  // runs each chunk's layers (recomputation, scratch arenas)
  int64_t output_chunk_rows_ = 0;
  mutable MoeStepStats moe_stats_;  // the training forwards' router statistics since take_moe_stats
};

}  // namespace tessera::models
