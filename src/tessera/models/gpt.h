// GPT (GPT-2 architecture): learned absolute positions, pre-LN transformer blocks, final
// LayerNorm, output layer tied to the word embedding, cross entropy over the real vocabulary.
// Explicit forward and backward over one micro-batch; activations live in the caller's arena.
#pragma once
#include <memory>
#include <vector>

#include "tessera/nn/gpt_embedding.h"
#include "tessera/nn/layernorm.h"
#include "tessera/nn/transformer_layer.h"
#include "tessera/train/config.h"

namespace tessera::models {

struct LossSum {
  double loss_sum = 0;     // sum over tokens of mask * per-token loss
  double token_count = 0;  // sum of the loss mask
};

class GPTModel {
 public:
  GPTModel(const train::ModelConfig& config, int64_t vocab_size, DType dtype, Device device);
  void initialize(uint64_t seed) { store_.initialize(seed); }
  nn::ParameterStore& parameters() { return store_; }
  const nn::ParameterStore& parameters() const { return store_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t padded_vocab_size() const { return padded_vocab_; }
  const train::ModelConfig& config() const { return config_; }

  // tokens: i32 [b, s+1] (inputs then shifted labels); loss_mask: f32 [b, s]. Adds
  // grad_scale * d(loss_sum / token_count)/d(theta) to the gradient buffer.
  LossSum forward_backward(Arena& arena, const Tensor& tokens, const Tensor& loss_mask, double grad_scale,
                           const nn::DropoutContext& dropout);
  LossSum forward_loss(Arena& arena, const Tensor& tokens, const Tensor& loss_mask);  // no dropout, no grads
  // ids: i32 [b, s]; key_padding_mask: u8 [b, s] (1 = real token) or undefined; position_ids: i32 [b, s]
  // or undefined (0..s-1). Returns logits [s, b, padded_vocab].
  Tensor forward_logits(Arena& arena, const Tensor& ids, const Tensor& key_padding_mask, const Tensor& position_ids);

 private:
  struct Activations;
  struct Inputs {
    Tensor ids, positions, labels, mask;  // [s*b] each, sequence-major
    int64_t seq = 0, batch = 0;
  };
  Inputs prepare(Arena& arena, const Tensor& tokens, const Tensor& loss_mask) const;
  Tensor forward(Arena& arena, const Inputs& in, const Tensor& key_padding_mask, const nn::DropoutContext& dropout,
                 Activations& acts) const;
  LossSum loss(Arena& arena, const Inputs& in, Activations& acts) const;

  train::ModelConfig config_;
  int64_t vocab_size_, padded_vocab_;
  nn::ParameterStore store_;
  std::unique_ptr<nn::GPTEmbedding> embedding_;
  std::vector<nn::TransformerLayer> layers_;
  std::unique_ptr<nn::LayerNorm> final_layernorm_;
};

}  // namespace tessera::models
