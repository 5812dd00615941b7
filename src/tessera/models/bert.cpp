#include "tessera/models/bert.h"

#include <cmath>

#include "tessera/models/vocab.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linear.h"
#include "tessera/ops/upload.h"
#include "tessera/tensor_parallel/tp_cross_entropy.h"
#include "tessera/tensor_parallel/tp_mappings.h"

namespace tessera::models {

LossTerms BertLoss::forward(Arena&, const LossInputs&, const Tensor&, const Tensor&, const Tensor&) const {
  TESSERA_FAIL("the BERT loss is computed by BertModel::stage_loss (masked LM + sentence order), not per token");
}

namespace {
void require_bert_config(const TransformerConfig& c) {
  const LayerSpec spec = decoder_layer_spec(c);
  if (spec.norm != Norm::layernorm)
    TESSERA_CONFIG_FAIL("model.normalization = ", name(spec.norm), " is not supported by model.architecture = bert ",
                        "(it builds layernorm)");
  if (spec.self_attention.position != PositionEmbedding::learned_absolute)
    TESSERA_CONFIG_FAIL("model.position_embedding_type = ", name(spec.self_attention.position),
                        " is not supported by model.architecture = bert (it builds learned_absolute)");
  if (spec.mlp != Mlp::gelu)
    TESSERA_CONFIG_FAIL("model.activation = ", name(spec.mlp), " is not supported by model.architecture = bert ",
                        "(it builds gelu: the exact erf GeLU of Megatron-BERT)");
  if (c.untie_embeddings_and_output_weights)
    TESSERA_CONFIG_FAIL("model.untie_embeddings_and_output_weights = true is not supported by ",
                        "model.architecture = bert (its masked-LM output is tied to the word embedding)");
  if (!c.add_bias_linear)
    TESSERA_CONFIG_FAIL("model.add_bias_linear = false is not supported by model.architecture = bert");
  if (c.num_query_groups != 0 && c.num_query_groups != c.num_attention_heads)
    TESSERA_CONFIG_FAIL("model.num_query_groups = ", c.num_query_groups,
                        " is not supported by model.architecture = bert (multi-head attention only)");
}

// A small tensor's values on the host, in double (a device tensor is copied in its own dtype first).
std::vector<double> download(const Tensor& t) {
  std::vector<char> staged;
  Tensor host = t;
  if (!t.device().is_cpu()) {
    staged.resize(t.nbytes());
    host = Tensor(staged.data(), t.dtype(), t.shape(), Device::cpu());
    ops::copy(t, host);
  }
  std::vector<double> values(static_cast<size_t>(t.numel()));
  ops::copy(host, Tensor(values.data(), DType::f64, t.shape(), Device::cpu()));
  return values;
}

const BertInputs& bert_inputs(const MicroBatchInputs& in) {
  const auto* p = dynamic_cast<const BertInputs*>(&in);
  TESSERA_CHECK(p != nullptr, "BertModel was given another model's micro-batch inputs");
  return *p;
}
BertChunkActivations& bert_activations(const ChunkActivations& acts) {
  const auto* p = dynamic_cast<const BertChunkActivations*>(&acts);
  TESSERA_CHECK(p != nullptr, "BertModel was given another model's activations");
  return const_cast<BertChunkActivations&>(*p);
}
Tensor single(const StageTensors& tensors, const char* what) {
  TESSERA_CHECK(tensors.size() <= 1, "a BERT stage passes one tensor, got ", tensors.size(), " ", what);
  return tensors.empty() ? Tensor() : tensors[0];
}
}  // namespace

BertModel::BertModel(const TransformerConfig& config, int64_t vocab_size, DType dtype, Device device,
                     std::vector<ChunkLayout> layouts, const parallel::TensorParallel& tp)
    : config_(config), tp_(tp), vocab_size_(vocab_size) {
  require_bert_config(config);
  padded_vocab_ = models::padded_vocab_size(vocab_size, config.make_vocab_size_divisible_by, tp.size);
  const double std = config.init_method_std;
  nn::TransformerLayerShape shape{{config.hidden_size, config.num_attention_heads, config.num_attention_heads,
                                   config.attention_dropout},
                                  config.ffn_hidden_size,
                                  config.hidden_dropout,
                                  config.layernorm_epsilon,
                                  std,
                                  std / std::sqrt(2.0 * static_cast<double>(config.num_layers))};
  shape.attention.causal = false;
  shape.mlp.gelu_erf = true;
  TESSERA_CHECK(!layouts.empty(), "a BERT model needs at least one chunk");
  for (size_t c = 0; c < layouts.size(); ++c) {
    ChunkLayout layout = layouts[c];
    if (layout.num_layers < 0) layout.num_layers = config.num_layers - layout.first_layer;
    TESSERA_CHECK(layout.first_layer >= 0 && layout.first_layer + layout.num_layers <= config.num_layers, "chunk ",
                  c, " layers outside the model's ", config.num_layers, " layers");
    if (layout.has_embedding) {
      TESSERA_CHECK(c == 0 && !embedding_, "only the first chunk of a rank can hold the embedding");
      const int first_param = static_cast<int>(store_.parameters().size());
      embedding_ = std::make_unique<nn::GPTEmbedding>(store_, padded_vocab_, config.max_position_embeddings,
                                                      config.hidden_size, std, config.hidden_dropout, tp,
                                                      kTokenTypes);
      embedding_params_ = {first_param, static_cast<int>(store_.parameters().size())};
      output_weight_ = embedding_->word_embeddings();
      store_.roles(output_weight_).tied_embedding = true;
    }
    Chunk chunk;
    chunk.layout = layout;
    chunk.layers.reserve(static_cast<size_t>(layout.num_layers));
    for (int64_t i = layout.first_layer; i < layout.first_layer + layout.num_layers; ++i) {
      const int first_param = static_cast<int>(store_.parameters().size());
      chunk.layers.emplace_back(store_, "encoder.layers." + std::to_string(i), shape, tp);
      chunk.layer_params.emplace_back(first_param, static_cast<int>(store_.parameters().size()));
    }
    chunks_.push_back(std::move(chunk));
    if (layout.has_head) {
      TESSERA_CHECK(c + 1 == layouts.size(), "only the last chunk of a rank can hold the head");
      const int first_head_param = static_cast<int>(store_.parameters().size());
      const bool sp = tp.sequence_parallel;
      final_layernorm_ = std::make_unique<nn::Norm>(store_, "encoder.final_layernorm", config.hidden_size,
                                                    config.layernorm_epsilon, nn::NormKind::layernorm, sp);
      lm_dense_ = std::make_unique<nn::Linear>(store_, "lm_head.dense", config.hidden_size, config.hidden_size, true,
                                               std, sp);
      lm_layernorm_ = std::make_unique<nn::LayerNorm>(store_, "lm_head.layer_norm", config.hidden_size,
                                                      config.layernorm_epsilon, sp);
      if (output_weight_ < 0) {  // the last stage's copy of the tied word embedding
        output_weight_ = store_.add("output_layer.weight", {padded_vocab_ / tp.size, config.hidden_size},
                                    nn::Init::normal, std, true,
                                    nn::Sharding::split(0, padded_vocab_, tp.size, tp.rank));
        nn::ParameterRoles& roles = store_.roles(output_weight_);
        roles.tied_embedding = true;
        roles.copy_of = "embedding.word_embeddings.weight";
        roles.vocab_axis = 0;
      }
      output_bias_ = store_.add("output_layer.bias", {padded_vocab_ / tp.size}, nn::Init::zeros, 0.0, false,
                                nn::Sharding::split(0, padded_vocab_, tp.size, tp.rank));
      store_.roles(output_bias_).vocab_axis = 0;
      // The pooler and binary head read the [CLS] rows of the gathered hidden state: every TP rank
      // computes the same values and gradients (replicated, no reduction).
      pooler_ = std::make_unique<nn::Linear>(store_, "pooler.dense", config.hidden_size, config.hidden_size, true, std);
      binary_head_ = std::make_unique<nn::Linear>(store_, "binary_head", config.hidden_size, 2, true, std);
      head_params_ = {first_head_param, static_cast<int>(store_.parameters().size())};
    }
  }
  store_.allocate(dtype, device);
  layer_stack_ = std::make_unique<nn::LayerStack>(nn::RecomputeConfig{}, device);
}

void BertModel::set_recompute(const nn::RecomputeConfig& config) {
  for (size_t c = 0; c < chunks_.size(); ++c)
    nn::check_recompute_layers(config, chunks_[c].layout.num_layers, "model chunk " + std::to_string(c));
  layer_stack_ = std::make_unique<nn::LayerStack>(config, store_.device());
}

void BertModel::set_loss(std::shared_ptr<const TokenLoss> loss) {
  TESSERA_CHECK(loss != nullptr, "BertModel::set_loss: no loss");
  if (loss->name() != "lm")
    TESSERA_CONFIG_FAIL("training.loss = '", loss->name(), "' is not supported by model.architecture = bert (its ",
                        "loss is the masked-LM loss plus the sentence-order loss: training.loss = \"lm\")");
}

DType BertModel::loss_dtype() const { return store_.device().is_cuda() ? DType::f32 : store_.dtype(); }

std::vector<Shape> BertModel::stage_shapes(int64_t seq, int64_t batch) const {
  return {{tp_.local_rows(seq * batch), config_.hidden_size}};
}

BertInputs BertModel::prepare(Arena& arena, const MicroBatch& batch) const {
  const Tensor& tokens = batch.tokens;
  TESSERA_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::i32 && tokens.device().is_cpu(),
                "BERT tokens must be host i32 [b, s], got ", tokens.describe());
  BertInputs in;
  in.batch = tokens.dim(0);
  in.seq = tokens.dim(1);
  const int64_t b = in.batch, s = in.seq;
  TESSERA_CHECK(s >= 1 && s <= config_.max_position_embeddings, "sequence length ", s,
                " outside [1, max_position_embeddings = ", config_.max_position_embeddings, "]");
  TESSERA_CHECK(!tp_.sequence_parallel || s * b / tp_.size >= b,
                "BERT with sequence parallelism needs seq_length >= tensor_model_parallel_size");
  auto host = [&](const Tensor& t, DType dtype, Shape shape, const char* what) -> const void* {
    if (!t.data()) return nullptr;
    expect_tensor(t, dtype, shape, what);
    TESSERA_CHECK(t.device().is_cpu(), what, " must be a host tensor, got ", t.describe());
    return t.data();
  };
  const auto* tok = tokens.data_as<int32_t>();
  const auto* labels = static_cast<const int32_t*>(host(batch.labels, DType::i32, {b, s}, "labels"));
  const auto* types = static_cast<const int32_t*>(host(batch.token_types, DType::i32, {b, s}, "token_types"));
  const auto* pad = static_cast<const uint8_t*>(host(batch.padding_mask, DType::u8, {b, s}, "padding_mask"));
  const auto* mask = static_cast<const float*>(host(batch.loss_mask, DType::f32, {b, s}, "loss_mask"));
  const auto* sent = static_cast<const int32_t*>(host(batch.sentence_labels, DType::i32, {b}, "sentence_labels"));
  const size_t n = static_cast<size_t>(s * b);
  std::vector<int32_t> ids(n), positions(n), type_rows(n);
  std::vector<uint8_t> padding(n);
  in.host_mask.resize(n);
  in.host_labels.resize(n);
  for (int64_t si = 0; si < s; ++si)
    for (int64_t bi = 0; bi < b; ++bi) {
      const size_t row = static_cast<size_t>(si * b + bi), src = static_cast<size_t>(bi * s + si);
      ids[row] = tok[src];
      positions[row] = static_cast<int32_t>(si);
      type_rows[row] = types ? types[src] : 0;
      in.host_mask[row] = mask ? mask[src] : 0.0f;
      in.host_labels[row] = labels ? labels[src] : tok[src];
      if (ids[row] < 0 || ids[row] >= vocab_size_ || in.host_labels[row] < 0 || in.host_labels[row] >= vocab_size_)
        TESSERA_FAIL("token or label id ", ids[row] < 0 || ids[row] >= vocab_size_ ? ids[row] : in.host_labels[row],
                     " in micro-batch sample ", bi, " is outside the vocabulary [0, ", vocab_size_, ")");
      if (type_rows[row] < 0 || type_rows[row] >= kTokenTypes)
        TESSERA_FAIL("token type ", type_rows[row], " in micro-batch sample ", bi, " is outside [0, ", kTokenTypes,
                     ")");
    }
  for (size_t i = 0; i < n; ++i) padding[i] = pad ? pad[i] : 1;  // [b, s] as given
  in.host_sentence_labels.assign(static_cast<size_t>(b), 0);
  for (int64_t bi = 0; bi < b; ++bi) {
    if (sent) in.host_sentence_labels[static_cast<size_t>(bi)] = sent[bi];
    TESSERA_CHECK(in.host_sentence_labels[static_cast<size_t>(bi)] == 0 ||
                      in.host_sentence_labels[static_cast<size_t>(bi)] == 1,
                  "sentence label of sample ", bi, " must be 0 or 1");
  }
  in.ids = ops::upload(arena, ids, {static_cast<int64_t>(n)});
  in.positions = ops::upload(arena, positions, {static_cast<int64_t>(n)});
  in.token_types = ops::upload(arena, type_rows, {static_cast<int64_t>(n)});
  in.labels = ops::upload(arena, in.host_labels, {static_cast<int64_t>(n)});
  in.padding = ops::upload(arena, padding, {b, s});
  in.sentence_labels = ops::upload(arena, in.host_sentence_labels, {b});
  Tensor mask_f32 = ops::upload(arena, in.host_mask, {static_cast<int64_t>(n)});
  if (loss_dtype() == DType::f32) {
    in.mask = mask_f32;
  } else {
    in.mask = arena.allocate(loss_dtype(), {static_cast<int64_t>(n)});
    ops::copy(mask_f32, in.mask);
  }
  return in;
}

Tensor BertModel::forward_chunk(int c, Arena& arena, const BertInputs& in, const Tensor& input,
                                const nn::DropoutContext& dropout, BertChunkActivations& acts) const {
  const Chunk& chunk = chunks_.at(c);
  Tensor x;
  if (chunk.layout.has_embedding) {
    x = embedding_->forward(arena, in.ids, in.positions, dropout, in.token_types);
  } else {
    TESSERA_CHECK(input.data() != nullptr, "chunk ", c, " needs the previous chunk's output");
    x = input;
  }
  acts.input = input;
  x = layer_stack_->forward(chunk.layers, arena, x, in.seq, in.batch, in.padding, dropout, acts.layers, in.positions);
  if (!chunk.layout.has_head) return x;
  acts.encoded = final_layernorm_->forward(arena, x, acts.final_ln);
  // Masked LM head: dense + GeLU + LayerNorm on this rank's rows, then the vocabulary-parallel output.
  acts.lm_dense = lm_dense_->forward(arena, acts.encoded);
  acts.lm_act = arena.allocate(acts.lm_dense.dtype(), acts.lm_dense.shape());
  ops::activation_forward(ops::Activation::gelu_erf, acts.lm_dense, acts.lm_act);
  Tensor lm_normed = lm_layernorm_->forward(arena, acts.lm_act, acts.lm_ln);
  acts.lm_hidden = tp_.sequence_parallel ? parallel::gather_from_sp_forward(arena, lm_normed, tp_)
                                         : parallel::copy_to_tp_forward(lm_normed, tp_);
  acts.logits = arena.allocate(store_.dtype(), {in.seq * in.batch, padded_vocab_ / tp_.size});
  ops::linear_forward(acts.lm_hidden, store_.value(output_weight_), store_.value(output_bias_), acts.logits);
  // Binary head: pooler (dense + tanh) on the [CLS] rows (the first b rows, sequence-major).
  Tensor full = tp_.sequence_parallel ? parallel::gather_from_sp_forward(arena, acts.encoded, tp_) : acts.encoded;
  acts.cls = full.rows(0, in.batch);
  acts.pooled_pre = pooler_->forward(arena, acts.cls);
  acts.pooled = arena.allocate(acts.pooled_pre.dtype(), acts.pooled_pre.shape());
  ops::activation_forward(ops::Activation::tanh, acts.pooled_pre, acts.pooled);
  acts.binary_logits = binary_head_->forward(arena, acts.pooled);
  return acts.logits;
}

LossSum BertModel::chunk_loss(Arena& arena, const BertInputs& in, BertChunkActivations& acts) const {
  const int64_t n = in.seq * in.batch, b = in.batch;
  Tensor losses = arena.allocate(loss_dtype(), {n});
  acts.log_sum_exp = arena.allocate(loss_dtype(), {n});
  parallel::vocab_parallel_cross_entropy_forward(acts.logits, in.labels, tp_.rank * (padded_vocab_ / tp_.size),
                                                 vocab_size_, tp_, losses, acts.log_sum_exp);
  double count = 0;
  for (float m : in.host_mask) count += m;
  const double lm_loss = count > 0 ? ops::masked_sum(losses, in.mask) / count : 0.0;
  // d(lm_loss) / d(token loss) = mask / count
  acts.dlosses = arena.allocate(loss_dtype(), {n});
  ops::copy(in.mask, acts.dlosses);
  ops::scale_inplace(acts.dlosses, count > 0 ? 1.0 / count : 0.0);

  Tensor binary_logits = acts.binary_logits;
  if (binary_logits.dtype() != loss_dtype()) {
    binary_logits = arena.allocate(loss_dtype(), acts.binary_logits.shape());
    ops::copy(acts.binary_logits, binary_logits);
  }
  Tensor binary_losses = arena.allocate(loss_dtype(), {b});
  acts.binary_lse = arena.allocate(loss_dtype(), {b});
  ops::cross_entropy_forward(binary_logits, in.sentence_labels, 2, binary_losses, acts.binary_lse);
  // On the host in double (ops::copy converts): b losses and 2 b logits.
  const std::vector<double> host_binary = download(binary_losses);
  const std::vector<double> host_logits = download(binary_logits);
  double sop_sum = 0, sop_correct = 0;
  for (int64_t i = 0; i < b; ++i) {
    sop_sum += host_binary[static_cast<size_t>(i)];
    const int predicted = host_logits[static_cast<size_t>(2 * i + 1)] > host_logits[static_cast<size_t>(2 * i)] ? 1 : 0;
    sop_correct += predicted == in.host_sentence_labels[static_cast<size_t>(i)] ? 1 : 0;
  }
  const double sop_loss = sop_sum / static_cast<double>(b);
  acts.binary_dlosses = arena.allocate(loss_dtype(), {b});
  ops::fill(acts.binary_dlosses, 1.0 / static_cast<double>(b));
  LossSum result;
  result.loss_sum = lm_loss + sop_loss;
  result.denominator = 1;
  result.metric_sums = {{"lm_loss", lm_loss},
                        {"sop_loss", sop_loss},
                        {"sop_accuracy", sop_correct / static_cast<double>(b)}};
  return result;
}

Tensor BertModel::backward_chunk(int c, Arena& arena, const BertInputs& in, const Tensor& doutput, double grad_scale,
                                 const nn::DropoutContext& dropout, const BertChunkActivations& acts,
                                 const std::function<void(int, int)>& grads_final) const {
  const Chunk& chunk = chunks_.at(c);
  Tensor dx = doutput;
  if (chunk.layout.has_head) {
    // Masked LM: d(grad_scale * lm_loss) back through the output layer, LayerNorm, GeLU, dense.
    Tensor dlosses = arena.allocate(loss_dtype(), acts.dlosses.shape());
    ops::copy(acts.dlosses, dlosses);
    ops::scale_inplace(dlosses, grad_scale);
    Tensor dlogits = arena.allocate(store_.dtype(), acts.logits.shape());
    parallel::vocab_parallel_cross_entropy_backward(acts.logits, in.labels, acts.log_sum_exp, dlosses,
                                                    tp_.rank * (padded_vocab_ / tp_.size), vocab_size_, tp_, dlogits);
    Tensor dhidden = arena.allocate(store_.dtype(), acts.lm_hidden.shape());
    ops::linear_backward(dlogits, acts.lm_hidden, store_.value(output_weight_), dhidden,
                         store_.grad(output_weight_), store_.grad(output_bias_));
    Tensor dnormed = tp_.sequence_parallel ? parallel::gather_from_sp_backward(arena, dhidden, tp_)
                                           : parallel::copy_to_tp_backward(arena, dhidden, tp_);
    Tensor dact = lm_layernorm_->backward(arena, dnormed, acts.lm_ln);
    Tensor ddense = arena.allocate(dact.dtype(), dact.shape());
    ops::activation_backward(ops::Activation::gelu_erf, dact, acts.lm_dense, ddense);
    Tensor dencoded = lm_dense_->backward(arena, ddense, acts.encoded);
    // Binary head: d(grad_scale * sop_loss) back to the [CLS] rows.
    Tensor dbinary_losses = arena.allocate(loss_dtype(), acts.binary_dlosses.shape());
    ops::copy(acts.binary_dlosses, dbinary_losses);
    ops::scale_inplace(dbinary_losses, grad_scale);
    Tensor binary_logits = acts.binary_logits, dbinary = arena.allocate(loss_dtype(), acts.binary_logits.shape());
    if (binary_logits.dtype() != loss_dtype()) {
      binary_logits = arena.allocate(loss_dtype(), acts.binary_logits.shape());
      ops::copy(acts.binary_logits, binary_logits);
    }
    ops::cross_entropy_backward(binary_logits, in.sentence_labels, acts.binary_lse, dbinary_losses, 2, dbinary);
    if (dbinary.dtype() != store_.dtype()) {
      Tensor cast = arena.allocate(store_.dtype(), dbinary.shape());
      ops::copy(dbinary, cast);
      dbinary = cast;
    }
    Tensor dpooled = binary_head_->backward(arena, dbinary, acts.pooled);
    Tensor dpooled_pre = arena.allocate(dpooled.dtype(), dpooled.shape());
    ops::activation_backward(ops::Activation::tanh, dpooled, acts.pooled_pre, dpooled_pre);
    Tensor dcls = pooler_->backward(arena, dpooled_pre, acts.cls);
    // The [CLS] rows are global rows [0, b): every rank's without SP, rank 0's first rows under SP.
    if (!tp_.sequence_parallel || tp_.rank == 0) ops::add_inplace(dencoded.rows(0, in.batch), dcls);
    dx = final_layernorm_->backward(arena, dencoded, acts.final_ln);
    if (grads_final) grads_final(head_params_.first, head_params_.second);
  }
  dx = layer_stack_->backward(chunk.layers, arena, dx, in.seq, in.batch, dropout, acts.layers, [&](size_t i) {
    if (grads_final) grads_final(chunk.layer_params[i].first, chunk.layer_params[i].second);
  });
  if (!chunk.layout.has_embedding) return dx;
  embedding_->backward(arena, dx, in.ids, in.positions, dropout, in.token_types);
  if (grads_final) grads_final(embedding_params_.first, embedding_params_.second);
  return Tensor();
}

std::unique_ptr<MicroBatchInputs> BertModel::prepare_micro_batch(Arena& arena, const MicroBatch& batch) const {
  return std::make_unique<BertInputs>(prepare(arena, batch));
}

std::unique_ptr<ChunkActivations> BertModel::make_activations() const {
  return std::make_unique<BertChunkActivations>();
}

StageTensors BertModel::forward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& input,
                                      const nn::DropoutContext& dropout, ChunkActivations& acts) const {
  return {forward_chunk(chunk, arena, bert_inputs(in), single(input, "inputs"), dropout, bert_activations(acts))};
}

LossSum BertModel::stage_loss(Arena& arena, const MicroBatchInputs& in, ChunkActivations& acts,
                              std::optional<double> /*backward_grad_scale: the logits are kept for backward_chunk*/) const {
  return chunk_loss(arena, bert_inputs(in), bert_activations(acts));
}

StageTensors BertModel::backward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& doutput,
                                       double grad_scale, const nn::DropoutContext& dropout,
                                       const ChunkActivations& acts,
                                       const std::function<void(int, int)>& grads_final) const {
  Tensor dinput = backward_chunk(chunk, arena, bert_inputs(in), single(doutput, "output gradients"), grad_scale,
                                 dropout, bert_activations(acts), grads_final);
  return dinput.data() ? StageTensors{dinput} : StageTensors{};
}

LossSum BertModel::forward_backward(Arena& arena, const MicroBatch& batch, double grad_scale,
                                    const nn::DropoutContext& dropout, bool backward) {
  TESSERA_CHECK(chunks_.size() == 1 && chunks_[0].layout.has_embedding && chunks_[0].layout.has_head,
                "BertModel::forward_backward needs the whole model in one chunk");
  BertInputs in = prepare(arena, batch);
  BertChunkActivations acts;
  forward_chunk(0, arena, in, Tensor(), dropout, acts);
  LossSum result = chunk_loss(arena, in, acts);
  if (backward) backward_chunk(0, arena, in, Tensor(), grad_scale, dropout, acts);
  return result;
}

std::pair<Tensor, Tensor> BertModel::forward_logits(Arena& arena, const Tensor& ids, const Tensor& token_types,
                                                    const Tensor& padding_mask) {
  TESSERA_CHECK(chunks_.size() == 1 && chunks_[0].layout.has_embedding && chunks_[0].layout.has_head,
                "BertModel::forward_logits needs the whole model in one chunk");
  TESSERA_CHECK(ids.ndim() == 2, "ids must be i32 [b, s], got ", ids.describe());
  MicroBatch batch;
  batch.tokens = ids;
  batch.token_types = token_types;
  batch.padding_mask = padding_mask;
  BertInputs in = prepare(arena, batch);
  BertChunkActivations acts;
  Tensor logits = forward_chunk(0, arena, in, Tensor(), nn::DropoutContext{}, acts);
  logits = parallel::gather_from_tp_last_dim_forward(arena, logits, tp_);
  return {logits.view({in.seq, in.batch, padded_vocab_}), acts.binary_logits};
}

}  // namespace tessera::models
