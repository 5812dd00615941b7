// T5 (HF T5ForConditionalGeneration; Megatron's T5Model with T5's own layer choices): a shared
// word embedding (vocabulary-parallel, no position table), an encoder stack and a decoder stack of
// pre-norm T5 blocks (nn/t5_layer.h: RMS LayerNorm without mean, attention without biases or
// 1/sqrt(d) scaling, ReLU or gated-GeLU feed-forward), each stack with one relative position bias
// (bidirectional in the encoder, causal in the decoder) computed once and added in every layer,
// a final RMS LayerNorm and dropout per stack; the decoder's layers also cross-attend to the
// encoder's output. Output layer: tied to the word embedding with T5's d_model^-0.5 scaling of the
// decoder output, or untied (model.untie_embeddings_and_output_weights: output_layer.weight = HF's
// lm_head, no scaling).
// Loss of a micro-batch (Megatron's T5 loss_func): lm_loss = the cross entropy of the decoder's
// labels summed over the loss mask / its count; the step's loss is the mean over its micro-batches
// and DP ranks (each micro-batch's denominator is 1). Metric: lm_loss.
// Parallelism: TP (+SP) as GPT (vocabulary-parallel embedding and output layer, heads, the
// relative bias's heads and the feed-forward split); DP with or without the distributed optimizer.
// Pipeline parallelism is not supported (Megatron's pipeline_model_parallel_split_rank, the
// encoder/decoder split, is not built): one chunk holds the whole model.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tessera/nn/gpt_embedding.h"
#include "tessera/nn/norm.h"
#include "tessera/nn/relative_position_bias.h"
#include "tessera/nn/t5_layer.h"
#include "tessera/models/stage_model.h"
#include "tessera/models/transformer_config.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::models {

// The T5 loss the trainer sees (training.loss must be "lm"): a denominator of 1 per micro-batch,
// so the step's loss is the mean of the micro-batches' lm_loss.
class T5Loss : public TokenLoss {
 public:
  std::string name() const override { return "lm"; }
  double denominator(const LossInputs& inputs) const override { return inputs.batch > 0 ? 1.0 : 0.0; }
  LossTerms forward(Arena&, const LossInputs&, const Tensor&, const Tensor&, const Tensor&) const override;
};

// One micro-batch's inputs, sequence-major ([s, b] flattened) like GPT's.
struct T5Inputs : MicroBatchInputs {
  Tensor ids, decoder_ids;                 // i32 [s*b], [sd*b]
  Tensor padding, decoder_padding;         // u8 [b, s], [b, sd]
  Tensor labels, mask;                     // i32 [sd*b], loss dtype [sd*b]
  int64_t seq = 0, decoder_seq = 0, batch = 0;
  std::vector<float> host_mask;            // [sd*b], sequence-major
};

struct T5Activations : ChunkActivations {
  nn::RelativePositionBias::Saved encoder_bias_saved, decoder_bias_saved;
  Tensor encoder_bias, decoder_bias;       // [nh/tp, s, s], [nh/tp, sd, sd]
  std::vector<nn::T5Layer::Saved> encoder_layers, decoder_layers;
  nn::Norm::Saved encoder_final, decoder_final;
  Tensor encoded;                          // the encoder's output (after its final norm and dropout)
  Tensor hidden;                           // the output layer's input (scaled when tied; gathered under SP)
  Tensor logits, log_sum_exp, dlosses;     // this rank's vocabulary columns [sd*b, V'/tp]
};

class T5Model : public StageModel {
 public:
  // Rejects (ConfigError) what T5 does not build: it needs rmsnorm, relative positions, relu or
  // geglu, no biases, multi-head attention and one chunk (no pipeline parallelism).
  T5Model(const TransformerConfig& config, int64_t vocab_size, DType dtype, Device device,
          std::vector<ChunkLayout> chunks = {ChunkLayout{}}, const parallel::TensorParallel& tp = {});

  void initialize(uint64_t seed) override { store_.initialize(seed); }
  nn::ParameterStore& parameters() override { return store_; }
  const nn::ParameterStore& parameters() const override { return store_; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t padded_vocab_size() const override { return padded_vocab_; }
  int num_chunks() const override { return 1; }
  const ChunkLayout& chunk_layout(int chunk) const override;
  std::vector<Shape> stage_shapes(int64_t seq, int64_t batch) const override;
  void set_loss(std::shared_ptr<const TokenLoss> loss) override;
  const TokenLoss& loss() const override { return loss_; }
  const TransformerConfig& config() const { return config_; }
  int64_t num_decoder_layers() const { return static_cast<int64_t>(decoder_layers_.size()); }

  std::unique_ptr<MicroBatchInputs> prepare_micro_batch(Arena& arena, const MicroBatch& batch) const override;
  std::unique_ptr<ChunkActivations> make_activations() const override;
  StageTensors forward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& input,
                             const nn::DropoutContext& dropout, ChunkActivations& acts) const override;
  LossSum stage_loss(Arena& arena, const MicroBatchInputs& in, ChunkActivations& acts,
                     std::optional<double> backward_grad_scale) const override;
  StageTensors backward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& doutput,
                              double grad_scale, const nn::DropoutContext& dropout, const ChunkActivations& acts,
                              const std::function<void(int, int)>& grads_final = {}) const override;

  DType loss_dtype() const;
  // batch: tokens i32 [b, s] and padding_mask u8 [b, s] (the encoder's), decoder_tokens i32 [b, sd],
  // decoder_padding_mask u8 [b, sd]; labels i32 [b, sd] and loss_mask f32 [b, sd] (undefined: no loss).
  // Undefined padding masks: every token is real.
  T5Inputs prepare(Arena& arena, const MicroBatch& batch) const;
  // The encoder: fills acts.encoded (and its saved activations).
  void encode(Arena& arena, const T5Inputs& in, const nn::DropoutContext& dropout, T5Activations& acts) const;
  // The decoder and output layer on acts.encoded: returns this rank's logits [sd*b, V'/tp].
  Tensor decode(Arena& arena, const T5Inputs& in, const nn::DropoutContext& dropout, T5Activations& acts) const;
  LossSum chunk_loss(Arena& arena, const T5Inputs& in, T5Activations& acts) const;
  void backward(Arena& arena, const T5Inputs& in, double grad_scale, const nn::DropoutContext& dropout,
                const T5Activations& acts, const std::function<void(int, int)>& grads_final = {}) const;

  // Whole model: the loss of a micro-batch, with gradients of grad_scale * loss when backward is true.
  LossSum forward_backward(Arena& arena, const MicroBatch& batch, double grad_scale, const nn::DropoutContext& dropout,
                           bool backward = true);
  // Inference: encoder ids / padding [b, s], decoder ids / padding [b, sd] (paddings may be
  // undefined). Returns the logits [sd, b, padded_vocab] (gathered over TP).
  Tensor forward_logits(Arena& arena, const Tensor& ids, const Tensor& padding, const Tensor& decoder_ids,
                        const Tensor& decoder_padding);

 private:
  TransformerConfig config_;
  parallel::TensorParallel tp_;
  int64_t vocab_size_, padded_vocab_;
  ChunkLayout layout_;
  nn::ParameterStore store_;
  std::unique_ptr<nn::GPTEmbedding> embedding_;
  std::unique_ptr<nn::RelativePositionBias> encoder_bias_, decoder_bias_;
  std::vector<nn::T5Layer> encoder_layers_, decoder_layers_;
  std::unique_ptr<nn::Norm> encoder_final_, decoder_final_;
  int output_weight_ = -1;
  bool tied_ = true;
  T5Loss loss_;
};

}  // namespace tessera::models
