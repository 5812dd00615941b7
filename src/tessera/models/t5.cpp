#include "tessera/models/t5.h"

#include <cmath>

#include "tessera/models/vocab.h"
#include "tessera/ops/dropout.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linear.h"
#include "tessera/ops/upload.h"
#include "tessera/tensor_parallel/tp_cross_entropy.h"
#include "tessera/tensor_parallel/tp_mappings.h"

namespace tessera::models {

LossTerms T5Loss::forward(Arena&, const LossInputs&, const Tensor&, const Tensor&, const Tensor&) const {
  TESSERA_FAIL("the T5 loss is computed by T5Model::stage_loss (the decoder's masked mean), not per token");
}

namespace {
void require_t5_config(const TransformerConfig& c) {
  const LayerSpec spec = decoder_layer_spec(c);
  if (spec.norm != Norm::rmsnorm)
    TESSERA_CONFIG_FAIL("model.normalization = ", name(spec.norm), " is not supported by model.architecture = t5 ",
                        "(it builds rmsnorm: T5's LayerNorm without mean or bias)");
  if (spec.self_attention.position != PositionEmbedding::relative)
    TESSERA_CONFIG_FAIL("model.position_embedding_type = ", name(spec.self_attention.position),
                        " is not supported by model.architecture = t5 (it builds relative)");
  if (spec.mlp != Mlp::relu && spec.mlp != Mlp::geglu)
    TESSERA_CONFIG_FAIL("model.activation = ", name(spec.mlp), " is not supported by model.architecture = t5 ",
                        "(it builds relu, T5 v1.0, and geglu, v1.1's gated-gelu)");
  if (c.add_bias_linear)
    TESSERA_CONFIG_FAIL("model.add_bias_linear = true is not supported by model.architecture = t5 (T5 has no biases)");
  if (c.num_query_groups != 0 && c.num_query_groups != c.num_attention_heads)
    TESSERA_CONFIG_FAIL("model.num_query_groups = ", c.num_query_groups,
                        " is not supported by model.architecture = t5 (multi-head attention only)");
  if (c.num_experts > 0)
    TESSERA_CONFIG_FAIL("model.num_experts = ", c.num_experts, " is not supported by model.architecture = t5");
  if (c.num_decoder_layers < 0 || c.kv_channels < 0)
    TESSERA_CONFIG_FAIL("model.num_decoder_layers and model.kv_channels must be >= 0 (0: the default)");
  if (c.kv_channels == 0 && c.hidden_size % c.num_attention_heads != 0)
    TESSERA_CONFIG_FAIL("model.hidden_size = ", c.hidden_size, " is not divisible by model.num_attention_heads = ",
                        c.num_attention_heads, "; set model.kv_channels");
}

const T5Inputs& t5_inputs(const MicroBatchInputs& in) {
  const auto* p = dynamic_cast<const T5Inputs*>(&in);
  TESSERA_CHECK(p != nullptr, "T5Model was given another model's micro-batch inputs");
  return *p;
}
T5Activations& t5_activations(const ChunkActivations& acts) {
  const auto* p = dynamic_cast<const T5Activations*>(&acts);
  TESSERA_CHECK(p != nullptr, "T5Model was given another model's activations");
  return const_cast<T5Activations&>(*p);
}

// The stack's final dropout (HF's encoder / decoder dropout after final_layer_norm), in place.
void final_dropout(const Tensor& x, double p, const nn::DropoutContext& dropout, const char* site, uint64_t offset,
                   bool backward) {
  if (!dropout.training || p == 0) return;
  if (backward) ops::dropout_backward(x, p, dropout.stream(site), offset, x);
  else ops::dropout_forward(x, p, dropout.stream(site), offset, x);
}

// The decoder's embedding lookup draws its dropout mask apart from the encoder's.
nn::DropoutContext decoder_embedding_context(const nn::DropoutContext& dropout) {
  nn::DropoutContext d = dropout;
  d.pass_key = mix_stream(dropout.pass_key, stream_id("decoder.embedding"));
  return d;
}
}  // namespace

T5Model::T5Model(const TransformerConfig& config, int64_t vocab_size, DType dtype, Device device,
                 std::vector<ChunkLayout> layouts, const parallel::TensorParallel& tp)
    : config_(config), tp_(tp), vocab_size_(vocab_size) {
  require_t5_config(config);
  TESSERA_CHECK(layouts.size() == 1, "a T5 model is one chunk (no pipeline parallelism), got ", layouts.size());
  layout_ = layouts[0];
  if (!layout_.has_embedding || !layout_.has_head || layout_.first_layer != 0 ||
      (layout_.num_layers >= 0 && layout_.num_layers != config.num_layers))
    TESSERA_CONFIG_FAIL("model.architecture = t5 runs as one pipeline stage (Megatron's encoder/decoder split, ",
                        "pipeline_model_parallel_split_rank, is not supported)");
  layout_.num_layers = config.num_layers;
  padded_vocab_ = models::padded_vocab_size(vocab_size, config.make_vocab_size_divisible_by, tp.size);
  tied_ = !config.untie_embeddings_and_output_weights;
  // HF's T5 initialisation (initializer_factor 1; model.init_method_std is not used): the shared
  // embedding and an untied lm_head ~ N(0, 1), the relative bias ~ N(0, d_model^-1/2), the layers as
  // nn/t5_attention.h and nn/t5_mlp.h say. (With std 0.02 the d_model^-0.5 scaled logits start near
  // zero and the loss hardly moves.)
  const double std = 1.0, bias_std = 1.0 / std::sqrt(static_cast<double>(config.hidden_size));
  const int64_t decoder_layers = config.num_decoder_layers > 0 ? config.num_decoder_layers : config.num_layers;
  const int64_t kv = config.kv_channels > 0 ? config.kv_channels : config.hidden_size / config.num_attention_heads;
  const int64_t ffn = config.ffn_hidden_size > 0 ? config.ffn_hidden_size : 4 * config.hidden_size;
  nn::T5LayerShape shape{config.hidden_size,
                         config.num_attention_heads,
                         kv,
                         ffn,
                         false,
                         config.activation == "geglu",
                         config.hidden_dropout,
                         config.attention_dropout,
                         config.layernorm_epsilon,
                         1.0};
  const bool sp = tp.sequence_parallel;
  embedding_ = std::make_unique<nn::GPTEmbedding>(store_, padded_vocab_, 0, config.hidden_size, std,
                                                  config.hidden_dropout, tp);
  if (tied_) {
    output_weight_ = embedding_->word_embeddings();
    store_.roles(output_weight_).tied_embedding = true;
  }
  encoder_bias_ = std::make_unique<nn::RelativePositionBias>(
      store_, "encoder.relative_attention_bias", config.relative_attention_num_buckets,
      config.relative_attention_max_distance, config.num_attention_heads, true, bias_std, tp);
  encoder_layers_.reserve(static_cast<size_t>(config.num_layers));
  for (int64_t i = 0; i < config.num_layers; ++i)
    encoder_layers_.emplace_back(store_, "encoder.layers." + std::to_string(i), shape, tp);
  encoder_final_ = std::make_unique<nn::Norm>(store_, "encoder.final_layernorm", config.hidden_size,
                                              config.layernorm_epsilon, nn::NormKind::rmsnorm, sp);
  decoder_bias_ = std::make_unique<nn::RelativePositionBias>(
      store_, "decoder.relative_attention_bias", config.relative_attention_num_buckets,
      config.relative_attention_max_distance, config.num_attention_heads, false, bias_std, tp);
  shape.decoder = true;
  decoder_layers_.reserve(static_cast<size_t>(decoder_layers));
  for (int64_t i = 0; i < decoder_layers; ++i)
    decoder_layers_.emplace_back(store_, "decoder.layers." + std::to_string(i), shape, tp);
  decoder_final_ = std::make_unique<nn::Norm>(store_, "decoder.final_layernorm", config.hidden_size,
                                              config.layernorm_epsilon, nn::NormKind::rmsnorm, sp);
  if (!tied_) {
    output_weight_ = store_.add("output_layer.weight", {padded_vocab_ / tp.size, config.hidden_size},
                                nn::Init::normal, std, true, nn::Sharding::split(0, padded_vocab_, tp.size, tp.rank));
    store_.roles(output_weight_).vocab_axis = 0;
  }
  store_.allocate(dtype, device);
}

const ChunkLayout& T5Model::chunk_layout(int chunk) const {
  TESSERA_CHECK(chunk == 0, "a T5 model has one chunk, asked for chunk ", chunk);
  return layout_;
}

void T5Model::set_loss(std::shared_ptr<const TokenLoss> loss) {
  TESSERA_CHECK(loss != nullptr, "T5Model::set_loss: no loss");
  if (loss->name() != "lm")
    TESSERA_CONFIG_FAIL("training.loss = '", loss->name(), "' is not supported by model.architecture = t5 (its ",
                        "loss is the decoder's masked-mean cross entropy: training.loss = \"lm\")");
}

DType T5Model::loss_dtype() const { return store_.device().is_cuda() ? DType::f32 : store_.dtype(); }

std::vector<Shape> T5Model::stage_shapes(int64_t seq, int64_t batch) const {
  return {{tp_.local_rows(seq * batch), config_.hidden_size}};
}

T5Inputs T5Model::prepare(Arena& arena, const MicroBatch& batch) const {
  const Tensor& tokens = batch.tokens;
  const Tensor& dec = batch.decoder_tokens;
  TESSERA_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::i32 && tokens.device().is_cpu(),
                "T5 tokens must be host i32 [b, s], got ", tokens.describe());
  TESSERA_CHECK(dec.ndim() == 2 && dec.dtype() == DType::i32 && dec.device().is_cpu() && dec.dim(0) == tokens.dim(0),
                "T5 decoder_tokens must be host i32 [b, sd] with the encoder's b = ", tokens.dim(0), ", got ",
                dec.data() ? dec.describe() : std::string("none"));
  T5Inputs in;
  in.batch = tokens.dim(0);
  in.seq = tokens.dim(1);
  in.decoder_seq = dec.dim(1);
  const int64_t b = in.batch, s = in.seq, sd = in.decoder_seq;
  if (tp_.sequence_parallel)
    TESSERA_CHECK((s * b) % tp_.size == 0 && (sd * b) % tp_.size == 0,
                  "T5 with sequence parallelism needs the encoder's and decoder's tokens per micro-batch (", s * b,
                  ", ", sd * b, ") divisible by tensor_model_parallel_size = ", tp_.size);
  auto host = [&](const Tensor& t, DType dtype, Shape shape, const char* what) -> const void* {
    if (!t.data()) return nullptr;
    expect_tensor(t, dtype, shape, what);
    TESSERA_CHECK(t.device().is_cpu(), what, " must be a host tensor, got ", t.describe());
    return t.data();
  };
  const auto* tok = tokens.data_as<int32_t>();
  const auto* dtok = dec.data_as<int32_t>();
  const auto* labels = static_cast<const int32_t*>(host(batch.labels, DType::i32, {b, sd}, "labels"));
  const auto* mask = static_cast<const float*>(host(batch.loss_mask, DType::f32, {b, sd}, "loss_mask"));
  const auto* pad = static_cast<const uint8_t*>(host(batch.padding_mask, DType::u8, {b, s}, "padding_mask"));
  const auto* dpad =
      static_cast<const uint8_t*>(host(batch.decoder_padding_mask, DType::u8, {b, sd}, "decoder_padding_mask"));
  auto check_id = [&](int32_t id, const char* what, int64_t sample) {
    if (id < 0 || id >= vocab_size_)
      TESSERA_FAIL(what, " id ", id, " in micro-batch sample ", sample, " is outside the vocabulary [0, ", vocab_size_,
                   ")");
  };
  std::vector<int32_t> ids(static_cast<size_t>(s * b)), dids(static_cast<size_t>(sd * b)), lab(static_cast<size_t>(sd * b));
  for (int64_t si = 0; si < s; ++si)
    for (int64_t bi = 0; bi < b; ++bi) {
      ids[static_cast<size_t>(si * b + bi)] = tok[bi * s + si];
      check_id(tok[bi * s + si], "encoder token", bi);
    }
  in.host_mask.assign(static_cast<size_t>(sd * b), 0.0f);
  for (int64_t si = 0; si < sd; ++si)
    for (int64_t bi = 0; bi < b; ++bi) {
      const size_t row = static_cast<size_t>(si * b + bi);
      const int64_t src = bi * sd + si;
      dids[row] = dtok[src];
      check_id(dtok[src], "decoder token", bi);
      in.host_mask[row] = mask ? mask[src] : 0.0f;
      lab[row] = labels ? labels[src] : 0;
      if (in.host_mask[row] != 0.0f) check_id(lab[row], "label", bi);
      else if (lab[row] < 0 || lab[row] >= vocab_size_) lab[row] = 0;  // a padded label outside the loss
    }
  std::vector<uint8_t> padding(static_cast<size_t>(b * s)), dpadding(static_cast<size_t>(b * sd));
  for (size_t i = 0; i < padding.size(); ++i) padding[i] = pad ? pad[i] : 1;
  for (size_t i = 0; i < dpadding.size(); ++i) dpadding[i] = dpad ? dpad[i] : 1;
  in.ids = ops::upload(arena, ids, {s * b});
  in.decoder_ids = ops::upload(arena, dids, {sd * b});
  in.labels = ops::upload(arena, lab, {sd * b});
  in.padding = ops::upload(arena, padding, {b, s});
  in.decoder_padding = ops::upload(arena, dpadding, {b, sd});
  Tensor mask_f32 = ops::upload(arena, in.host_mask, {sd * b});
  if (loss_dtype() == DType::f32) {
    in.mask = mask_f32;
  } else {
    in.mask = arena.allocate(loss_dtype(), {sd * b});
    ops::copy(mask_f32, in.mask);
  }
  return in;
}

void T5Model::encode(Arena& arena, const T5Inputs& in, const nn::DropoutContext& dropout, T5Activations& acts) const {
  const int64_t s = in.seq, b = in.batch;
  Tensor x = embedding_->forward(arena, in.ids, Tensor(), dropout);
  acts.encoder_bias = encoder_bias_->forward(arena, s, s, 0, acts.encoder_bias_saved);
  acts.encoder_layers.assign(encoder_layers_.size(), {});
  for (size_t i = 0; i < encoder_layers_.size(); ++i)
    x = encoder_layers_[i].forward(arena, x, s, b, acts.encoder_bias, in.padding, Tensor(), 0, Tensor(), dropout,
                                   acts.encoder_layers[i]);
  acts.encoded = encoder_final_->forward(arena, x, acts.encoder_final);
  final_dropout(acts.encoded, config_.hidden_dropout, dropout, "encoder.final_dropout",
                static_cast<uint64_t>(tp_.first_row(s * b) * config_.hidden_size), false);
}

Tensor T5Model::decode(Arena& arena, const T5Inputs& in, const nn::DropoutContext& dropout, T5Activations& acts) const {
  const int64_t s = in.seq, sd = in.decoder_seq, b = in.batch;
  TESSERA_CHECK(acts.encoded.data() != nullptr, "T5Model::decode needs the encoder's output (encode first)");
  Tensor x = embedding_->forward(arena, in.decoder_ids, Tensor(), decoder_embedding_context(dropout));
  acts.decoder_bias = decoder_bias_->forward(arena, sd, sd, 0, acts.decoder_bias_saved);
  acts.decoder_layers.assign(decoder_layers_.size(), {});
  for (size_t i = 0; i < decoder_layers_.size(); ++i)
    x = decoder_layers_[i].forward(arena, x, sd, b, acts.decoder_bias, in.decoder_padding, acts.encoded, s,
                                   in.padding, dropout, acts.decoder_layers[i]);
  Tensor y = decoder_final_->forward(arena, x, acts.decoder_final);
  final_dropout(y, config_.hidden_dropout, dropout, "decoder.final_dropout",
                static_cast<uint64_t>(tp_.first_row(sd * b) * config_.hidden_size), false);
  if (tied_) ops::scale_inplace(y, 1.0 / std::sqrt(static_cast<double>(config_.hidden_size)));
  acts.hidden = tp_.sequence_parallel ? parallel::gather_from_sp_forward(arena, y, tp_)
                                      : parallel::copy_to_tp_forward(y, tp_);
  acts.logits = arena.allocate(store_.dtype(), {sd * b, padded_vocab_ / tp_.size});
  ops::linear_forward(acts.hidden, store_.value(output_weight_), Tensor(), acts.logits);
  return acts.logits;
}

LossSum T5Model::chunk_loss(Arena& arena, const T5Inputs& in, T5Activations& acts) const {
  const int64_t n = in.decoder_seq * in.batch;
  Tensor losses = arena.allocate(loss_dtype(), {n});
  acts.log_sum_exp = arena.allocate(loss_dtype(), {n});
  parallel::vocab_parallel_cross_entropy_forward(acts.logits, in.labels, tp_.rank * (padded_vocab_ / tp_.size),
                                                 vocab_size_, tp_, losses, acts.log_sum_exp);
  double count = 0;
  for (float m : in.host_mask) count += m;
  const double lm_loss = count > 0 ? ops::masked_sum(losses, in.mask) / count : 0.0;
  acts.dlosses = arena.allocate(loss_dtype(), {n});
  ops::copy(in.mask, acts.dlosses);
  ops::scale_inplace(acts.dlosses, count > 0 ? 1.0 / count : 0.0);
  LossSum result;
  result.loss_sum = lm_loss;
  result.denominator = 1;
  result.metric_sums = {{"lm_loss", lm_loss}};
  return result;
}

void T5Model::backward(Arena& arena, const T5Inputs& in, double grad_scale, const nn::DropoutContext& dropout,
                       const T5Activations& acts, const std::function<void(int, int)>& grads_final) const {
  const int64_t s = in.seq, sd = in.decoder_seq, b = in.batch;
  // Output layer and loss.
  Tensor dlosses = arena.allocate(loss_dtype(), acts.dlosses.shape());
  ops::copy(acts.dlosses, dlosses);
  ops::scale_inplace(dlosses, grad_scale);
  Tensor dlogits = arena.allocate(store_.dtype(), acts.logits.shape());
  parallel::vocab_parallel_cross_entropy_backward(acts.logits, in.labels, acts.log_sum_exp, dlosses,
                                                  tp_.rank * (padded_vocab_ / tp_.size), vocab_size_, tp_, dlogits);
  Tensor dhidden = arena.allocate(store_.dtype(), acts.hidden.shape());
  ops::linear_backward(dlogits, acts.hidden, store_.value(output_weight_), dhidden, store_.grad(output_weight_),
                       Tensor());
  Tensor dy = tp_.sequence_parallel ? parallel::gather_from_sp_backward(arena, dhidden, tp_)
                                    : parallel::copy_to_tp_backward(arena, dhidden, tp_);
  if (tied_) ops::scale_inplace(dy, 1.0 / std::sqrt(static_cast<double>(config_.hidden_size)));
  final_dropout(dy, config_.hidden_dropout, dropout, "decoder.final_dropout",
                static_cast<uint64_t>(tp_.first_row(sd * b) * config_.hidden_size), true);
  // Decoder: each layer's cross-attention adds its part of d(encoder output).
  Tensor dx = decoder_final_->backward(arena, dy, acts.decoder_final);
  Tensor dencoded = arena.allocate(acts.encoded.dtype(), acts.encoded.shape());
  Tensor ddecoder_bias = arena.allocate(acts.decoder_bias.dtype(), acts.decoder_bias.shape());
  ops::fill(dencoded, 0.0);
  ops::fill(ddecoder_bias, 0.0);
  for (size_t i = decoder_layers_.size(); i-- > 0;)
    dx = decoder_layers_[i].backward(arena, dx, sd, b, s, dropout, acts.decoder_layers[i], ddecoder_bias, dencoded);
  decoder_bias_->backward(arena, ddecoder_bias, acts.decoder_bias_saved);
  embedding_->backward(arena, dx, in.decoder_ids, Tensor(), decoder_embedding_context(dropout));
  // Encoder.
  final_dropout(dencoded, config_.hidden_dropout, dropout, "encoder.final_dropout",
                static_cast<uint64_t>(tp_.first_row(s * b) * config_.hidden_size), true);
  dx = encoder_final_->backward(arena, dencoded, acts.encoder_final);
  Tensor dencoder_bias = arena.allocate(acts.encoder_bias.dtype(), acts.encoder_bias.shape());
  ops::fill(dencoder_bias, 0.0);
  for (size_t i = encoder_layers_.size(); i-- > 0;)
    dx = encoder_layers_[i].backward(arena, dx, s, b, 0, dropout, acts.encoder_layers[i], dencoder_bias, Tensor());
  encoder_bias_->backward(arena, dencoder_bias, acts.encoder_bias_saved);
  embedding_->backward(arena, dx, in.ids, Tensor(), dropout);
  if (grads_final) grads_final(0, static_cast<int>(store_.parameters().size()));
}

std::unique_ptr<MicroBatchInputs> T5Model::prepare_micro_batch(Arena& arena, const MicroBatch& batch) const {
  return std::make_unique<T5Inputs>(prepare(arena, batch));
}

std::unique_ptr<ChunkActivations> T5Model::make_activations() const { return std::make_unique<T5Activations>(); }

StageTensors T5Model::forward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& input,
                                    const nn::DropoutContext& dropout, ChunkActivations& acts) const {
  TESSERA_CHECK(chunk == 0 && input.empty(), "a T5 model runs as one stage (no pipeline parallelism)");
  const T5Inputs& inputs = t5_inputs(in);
  T5Activations& a = t5_activations(acts);
  encode(arena, inputs, dropout, a);
  return {decode(arena, inputs, dropout, a)};
}

LossSum T5Model::stage_loss(Arena& arena, const MicroBatchInputs& in, ChunkActivations& acts,
                            std::optional<double> /*backward_grad_scale: the logits are kept for backward_chunk*/) const {
  return chunk_loss(arena, t5_inputs(in), t5_activations(acts));
}

StageTensors T5Model::backward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors&,
                                     double grad_scale, const nn::DropoutContext& dropout,
                                     const ChunkActivations& acts,
                                     const std::function<void(int, int)>& grads_final) const {
  TESSERA_CHECK(chunk == 0, "a T5 model runs as one stage (no pipeline parallelism)");
  backward(arena, t5_inputs(in), grad_scale, dropout, t5_activations(acts), grads_final);
  return {};
}

LossSum T5Model::forward_backward(Arena& arena, const MicroBatch& batch, double grad_scale,
                                  const nn::DropoutContext& dropout, bool run_backward) {
  T5Inputs in = prepare(arena, batch);
  T5Activations acts;
  encode(arena, in, dropout, acts);
  decode(arena, in, dropout, acts);
  LossSum result = chunk_loss(arena, in, acts);
  if (run_backward) backward(arena, in, grad_scale, dropout, acts);
  return result;
}

Tensor T5Model::forward_logits(Arena& arena, const Tensor& ids, const Tensor& padding, const Tensor& decoder_ids,
                               const Tensor& decoder_padding) {
  MicroBatch batch;
  batch.tokens = ids;
  batch.padding_mask = padding;
  batch.decoder_tokens = decoder_ids;
  batch.decoder_padding_mask = decoder_padding;
  T5Inputs in = prepare(arena, batch);
  T5Activations acts;
  encode(arena, in, nn::DropoutContext{}, acts);
  Tensor logits = decode(arena, in, nn::DropoutContext{}, acts);
  logits = parallel::gather_from_tp_last_dim_forward(arena, logits, tp_);
  return logits.view({in.decoder_seq, in.batch, padded_vocab_});
}

}  // namespace tessera::models
