// BERT (Megatron BertModel = HF MegatronBertForPreTraining): word + learned position + token-type
// embeddings (no embedding LayerNorm), pre-LN encoder layers with bidirectional self-attention and
// the key padding mask, the exact (erf) GeLU MLP, a final LayerNorm, then two heads:
//   masked LM: lm_head.dense + GeLU + lm_head.layer_norm, output tied to the word embedding, plus
//              output_layer.bias (vocabulary-parallel);
//   binary:    pooler.dense + tanh on the [CLS] (first) token, then binary_head (2 classes: the
//              sentence-order / next-sentence label).
// Loss of a micro-batch (Megatron's BERT loss_func): lm_loss = the cross entropy summed over the
// masked tokens / their count, sop_loss = the binary cross entropy averaged over the samples,
// loss = lm_loss + sop_loss; the step's loss is the mean over its micro-batches and DP ranks (each
// micro-batch's denominator is 1). Metrics: lm_loss, sop_loss, mlm_accuracy, sop_accuracy.
// Parallelism: TP (+SP) as GPT (vocabulary-parallel embedding and output layer, heads and MLP
// split), PP with the tied word embedding copied to the last stage; every stage reads the
// micro-batch's padding mask, token types and labels from its own prepared inputs.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tessera/nn/gpt_embedding.h"
#include "tessera/nn/layernorm.h"
#include "tessera/nn/linear.h"
#include "tessera/nn/norm.h"
#include "tessera/nn/recompute.h"
#include "tessera/nn/transformer_layer.h"
#include "tessera/models/stage_model.h"
#include "tessera/models/transformer_config.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::models {

// The BERT loss the trainer sees (training.loss must be "lm"): a denominator of 1 per micro-batch,
// so the step's loss is the mean of the micro-batches' lm_loss + sop_loss.
class BertLoss : public TokenLoss {
 public:
  std::string name() const override { return "lm"; }
  double denominator(const LossInputs& inputs) const override { return inputs.batch > 0 ? 1.0 : 0.0; }
  LossTerms forward(Arena&, const LossInputs&, const Tensor&, const Tensor&, const Tensor&) const override;
};

// One micro-batch's inputs, sequence-major ([s, b] flattened) like GPT's.
struct BertInputs : MicroBatchInputs {
  Tensor ids, positions, token_types, labels, mask;  // i32 x4, loss dtype; [s*b]
  Tensor padding;                                    // u8 [b, s], 1 = a real token (attention keys)
  Tensor sentence_labels;                            // i32 [b]
  int64_t seq = 0, batch = 0;
  std::vector<float> host_mask;               // [s*b], sequence-major
  std::vector<int32_t> host_labels;           // [s*b]
  std::vector<int32_t> host_sentence_labels;  // [b]
};

struct BertChunkActivations : ChunkActivations {
  Tensor input;
  nn::LayerStackSaved layers;
  nn::Norm::Saved final_ln;
  Tensor encoded;                       // the final LayerNorm's output (this rank's rows under SP)
  Tensor lm_dense, lm_act;              // lm_head.dense output and its GeLU
  nn::LayerNorm::Saved lm_ln;
  Tensor lm_hidden;                     // the output layer's input (all-gathered under SP)
  Tensor logits, log_sum_exp, dlosses;  // this rank's vocabulary columns [s*b, V'/tp]
  Tensor cls, pooled_pre, pooled;       // [b, h]: the [CLS] rows, pooler.dense output, its tanh
  Tensor binary_logits, binary_lse, binary_dlosses;  // [b, 2], [b], [b]
};

class BertModel : public StageModel {
 public:
  // Rejects (ConfigError) what BERT does not build: it needs layernorm, learned_absolute
  // positions, gelu, tied output, multi-head attention with biases.
  BertModel(const TransformerConfig& config, int64_t vocab_size, DType dtype, Device device,
            std::vector<ChunkLayout> chunks = {ChunkLayout{}}, const parallel::TensorParallel& tp = {});
  static constexpr int64_t kTokenTypes = 2;

  void initialize(uint64_t seed) override { store_.initialize(seed); }
  nn::ParameterStore& parameters() override { return store_; }
  const nn::ParameterStore& parameters() const override { return store_; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t padded_vocab_size() const override { return padded_vocab_; }
  int num_chunks() const override { return static_cast<int>(chunks_.size()); }
  const ChunkLayout& chunk_layout(int chunk) const override { return chunks_.at(chunk).layout; }
  std::vector<Shape> stage_shapes(int64_t seq, int64_t batch) const override;
  void set_loss(std::shared_ptr<const TokenLoss> loss) override;
  const TokenLoss& loss() const override { return loss_; }
  void set_recompute(const nn::RecomputeConfig& config);
  size_t scratch_peak_bytes() const override { return layer_stack_->scratch_peak_bytes(); }
  const TransformerConfig& config() const { return config_; }

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
  BertInputs prepare(Arena& arena, const MicroBatch& batch) const;
  Tensor forward_chunk(int chunk, Arena& arena, const BertInputs& in, const Tensor& input,
                       const nn::DropoutContext& dropout, BertChunkActivations& acts) const;
  LossSum chunk_loss(Arena& arena, const BertInputs& in, BertChunkActivations& acts) const;
  Tensor backward_chunk(int chunk, Arena& arena, const BertInputs& in, const Tensor& doutput, double grad_scale,
                        const nn::DropoutContext& dropout, const BertChunkActivations& acts,
                        const std::function<void(int, int)>& grads_final = {}) const;

  // Whole model (one chunk): the loss of a micro-batch, with gradients of grad_scale * loss when
  // backward is true (no dropout unless `dropout` trains).
  LossSum forward_backward(Arena& arena, const MicroBatch& batch, double grad_scale, const nn::DropoutContext& dropout,
                           bool backward = true);
  // Inference: ids, token_types i32 [b, s], padding_mask u8 [b, s] (undefined: all real). Returns
  // the masked-LM logits [s, b, padded_vocab] (gathered over TP) and the binary logits [b, 2].
  std::pair<Tensor, Tensor> forward_logits(Arena& arena, const Tensor& ids, const Tensor& token_types,
                                           const Tensor& padding_mask);

 private:
  struct Chunk {
    ChunkLayout layout;
    std::vector<nn::TransformerLayer> layers;
    std::vector<std::pair<int, int>> layer_params;
  };
  // The cross entropy of the masked-LM logits and the binary head's, the loss and metric sums.
  TransformerConfig config_;
  parallel::TensorParallel tp_;
  int64_t vocab_size_, padded_vocab_;
  nn::ParameterStore store_;
  std::unique_ptr<nn::GPTEmbedding> embedding_;
  std::unique_ptr<nn::Norm> final_layernorm_;
  std::unique_ptr<nn::Linear> lm_dense_, pooler_, binary_head_;
  std::unique_ptr<nn::LayerNorm> lm_layernorm_;
  BertLoss loss_;
  int output_weight_ = -1, output_bias_ = -1;
  std::pair<int, int> embedding_params_{0, 0}, head_params_{0, 0};
  std::vector<Chunk> chunks_;
  std::unique_ptr<nn::LayerStack> layer_stack_;
};

}  // namespace tessera::models
