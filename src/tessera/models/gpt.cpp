#include "tessera/models/gpt.h"

#include <cmath>

#include "tessera/models/vocab.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linear.h"

namespace tessera::models {

struct GPTModel::Activations {
  std::vector<nn::TransformerLayer::Saved> layers;
  nn::LayerNorm::Saved final_ln;
  Tensor final_hidden, logits, losses, log_sum_exp;
};

GPTModel::GPTModel(const train::ModelConfig& config, int64_t vocab_size, DType dtype, Device device)
    : config_(config), vocab_size_(vocab_size) {
  padded_vocab_ = models::padded_vocab_size(vocab_size, config.make_vocab_size_divisible_by);
  double std = config.init_method_std;
  double output_std = std / std::sqrt(2.0 * static_cast<double>(config.num_layers));
  embedding_ = std::make_unique<nn::GPTEmbedding>(store_, padded_vocab_, config.max_position_embeddings,
                                                  config.hidden_size, std, config.hidden_dropout);
  nn::TransformerLayerShape shape{{config.hidden_size, config.num_attention_heads, config.num_query_groups,
                                   config.attention_dropout},
                                  config.ffn_hidden_size,
                                  config.hidden_dropout,
                                  config.layernorm_epsilon,
                                  std,
                                  output_std};
  layers_.reserve(config.num_layers);
  for (int64_t i = 0; i < config.num_layers; ++i)
    layers_.emplace_back(store_, "decoder.layers." + std::to_string(i), shape);
  final_layernorm_ =
      std::make_unique<nn::LayerNorm>(store_, "decoder.final_layernorm", config.hidden_size, config.layernorm_epsilon);
  store_.allocate(dtype, device);
}

GPTModel::Inputs GPTModel::prepare(Arena& arena, const Tensor& tokens, const Tensor& loss_mask) const {
  TESSERA_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::i32, "tokens must be i32 [b, s+1], got ",
                tokens.describe());
  Inputs in;
  in.batch = tokens.dim(0);
  in.seq = tokens.dim(1) - 1;
  TESSERA_CHECK(in.seq >= 1 && in.seq <= config_.max_position_embeddings, "sequence length ", in.seq,
                " outside [1, max_position_embeddings = ", config_.max_position_embeddings, "]");
  expect_tensor(loss_mask, DType::f32, {in.batch, in.seq}, "loss_mask");
  int64_t n = in.seq * in.batch;
  in.ids = arena.allocate(DType::i32, {n});
  in.positions = arena.allocate(DType::i32, {n});
  in.labels = arena.allocate(DType::i32, {n});
  in.mask = arena.allocate(store_.dtype(), {n});
  const int32_t* tok = tokens.data_as<int32_t>();
  const float* mask = loss_mask.data_as<float>();
  int32_t* ids = in.ids.data_as<int32_t>();
  int32_t* pos = in.positions.data_as<int32_t>();
  int32_t* labels = in.labels.data_as<int32_t>();
  for (int64_t s = 0; s < in.seq; ++s) {
    for (int64_t b = 0; b < in.batch; ++b) {
      int64_t row = s * in.batch + b;
      ids[row] = tok[b * (in.seq + 1) + s];
      labels[row] = tok[b * (in.seq + 1) + s + 1];
      pos[row] = static_cast<int32_t>(s);
    }
  }
  Tensor mask_f32 = arena.allocate(DType::f32, {n});
  float* m = mask_f32.data_as<float>();
  for (int64_t s = 0; s < in.seq; ++s)
    for (int64_t b = 0; b < in.batch; ++b) m[s * in.batch + b] = mask[b * in.seq + s];
  ops::copy(mask_f32, in.mask);
  return in;
}

Tensor GPTModel::forward(Arena& arena, const Inputs& in, const Tensor& key_padding_mask,
                         const nn::DropoutContext& dropout, Activations& acts) const {
  Tensor x = embedding_->forward(arena, in.ids, in.positions, dropout);
  acts.layers.resize(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i)
    x = layers_[i].forward(arena, x, in.seq, in.batch, key_padding_mask, dropout, acts.layers[i]);
  acts.final_hidden = final_layernorm_->forward(arena, x, acts.final_ln);
  acts.logits = arena.allocate(store_.dtype(), {in.seq * in.batch, padded_vocab_});
  ops::linear_forward(acts.final_hidden, store_.value(embedding_->word_embeddings()), Tensor(), acts.logits);
  return acts.logits;
}

LossSum GPTModel::loss(Arena& arena, const Inputs& in, Activations& acts) const {
  int64_t n = in.seq * in.batch;
  acts.losses = arena.allocate(store_.dtype(), {n});
  acts.log_sum_exp = arena.allocate(store_.dtype(), {n});
  ops::cross_entropy_forward(acts.logits, in.labels, vocab_size_, acts.losses, acts.log_sum_exp);
  Tensor losses64 = arena.allocate(DType::f64, {n});
  Tensor mask64 = arena.allocate(DType::f64, {n});
  ops::copy(acts.losses, losses64);
  ops::copy(in.mask, mask64);
  LossSum result;
  const double* l = losses64.data_as<double>();
  const double* m = mask64.data_as<double>();
  for (int64_t i = 0; i < n; ++i) {
    result.loss_sum += m[i] * l[i];
    result.token_count += m[i];
  }
  return result;
}

LossSum GPTModel::forward_backward(Arena& arena, const Tensor& tokens, const Tensor& loss_mask, double grad_scale,
                                   const nn::DropoutContext& dropout) {
  Inputs in = prepare(arena, tokens, loss_mask);
  Activations acts;
  forward(arena, in, Tensor(), dropout, acts);
  LossSum result = loss(arena, in, acts);
  if (result.token_count == 0) return result;

  // d(loss_sum / token_count * grad_scale) / d(per-token loss) = mask * grad_scale / token_count
  int64_t n = in.seq * in.batch;
  Tensor dlosses = arena.allocate(store_.dtype(), {n});
  ops::copy(in.mask, dlosses);
  ops::scale_inplace(dlosses, grad_scale / result.token_count);
  Tensor dlogits = arena.allocate(store_.dtype(), acts.logits.shape());
  ops::cross_entropy_backward(acts.logits, in.labels, acts.log_sum_exp, dlosses, vocab_size_, dlogits);
  Tensor dhidden = arena.allocate(store_.dtype(), acts.final_hidden.shape());
  int word = embedding_->word_embeddings();
  ops::linear_backward(dlogits, acts.final_hidden, store_.value(word), dhidden, store_.grad(word), Tensor());
  Tensor dx = final_layernorm_->backward(arena, dhidden, acts.final_ln);
  for (size_t i = layers_.size(); i-- > 0;) dx = layers_[i].backward(arena, dx, in.seq, in.batch, dropout, acts.layers[i]);
  embedding_->backward(arena, dx, in.ids, in.positions, dropout);
  return result;
}

LossSum GPTModel::forward_loss(Arena& arena, const Tensor& tokens, const Tensor& loss_mask) {
  Inputs in = prepare(arena, tokens, loss_mask);
  Activations acts;
  forward(arena, in, Tensor(), nn::DropoutContext{}, acts);
  return loss(arena, in, acts);
}

Tensor GPTModel::forward_logits(Arena& arena, const Tensor& ids, const Tensor& key_padding_mask,
                                const Tensor& position_ids) {
  TESSERA_CHECK(ids.ndim() == 2 && ids.dtype() == DType::i32, "ids must be i32 [b, s], got ", ids.describe());
  int64_t batch = ids.dim(0), seq = ids.dim(1);
  Inputs in;
  in.batch = batch;
  in.seq = seq;
  in.ids = arena.allocate(DType::i32, {seq * batch});
  in.positions = arena.allocate(DType::i32, {seq * batch});
  const int32_t* src = ids.data_as<int32_t>();
  const int32_t* pos_src = position_ids.data() ? position_ids.data_as<int32_t>() : nullptr;
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t b = 0; b < batch; ++b) {
      in.ids.data_as<int32_t>()[s * batch + b] = src[b * seq + s];
      in.positions.data_as<int32_t>()[s * batch + b] = pos_src ? pos_src[b * seq + s] : static_cast<int32_t>(s);
    }
  }
  Activations acts;
  Tensor logits = forward(arena, in, key_padding_mask, nn::DropoutContext{}, acts);
  return logits.view({seq, batch, padded_vocab_});
}

}  // namespace tessera::models
