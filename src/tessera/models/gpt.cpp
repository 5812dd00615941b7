#include "tessera/models/gpt.h"

#include <cmath>
#include <vector>

#include "tessera/models/lm_loss.h"
#include "tessera/models/vocab.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linear.h"
#include "tessera/ops/moe_router.h"
#include "tessera/ops/upload.h"
#include "tessera/tensor_parallel/tp_cross_entropy.h"
#include "tessera/tensor_parallel/tp_mappings.h"

namespace tessera::models {

namespace {
// The parts of the layer spec GPT implements (GPT-2, and Llama-style decoders: RMSNorm, RoPE or
// ALiBi, SwiGLU, grouped-query attention, untied output layer, no linear biases); the others are
// named values the config may hold but GPT rejects.
LayerSpec require_gpt_layer_spec(const TransformerConfig& config) {
  const LayerSpec spec = decoder_layer_spec(config);
  const PositionEmbedding position = spec.self_attention.position;
  if (position == PositionEmbedding::relative)
    TESSERA_CONFIG_FAIL("model.position_embedding_type = ", name(position), " is not supported yet by ",
                        "model.architecture = gpt (it builds learned_absolute, rope, alibi, none)");
  const Mlp ffn = spec.mlp == Mlp::moe ? spec.expert_mlp : spec.mlp;  // a MoE layer's experts use the activation
  if (ffn != Mlp::gelu && ffn != Mlp::swiglu)
    TESSERA_CONFIG_FAIL("model.activation = ", name(ffn), " (model.num_experts = ", config.num_experts,
                        ") is not supported yet by model.architecture = gpt (it builds gelu, swiglu)");
  if (position == PositionEmbedding::rope && (config.rotary_dim() < 2 || config.rotary_dim() > config.head_dim()))
    TESSERA_CONFIG_FAIL("model.rotary_percent = ", config.rotary_percent, " rotates ", config.rotary_dim(),
                        " of the head's ", config.head_dim(), " dims; it must rotate at least 2");
  return spec;
}

// The layer shape of `config` (the spec's norm, positions and MLP).
nn::TransformerLayerShape layer_shape(const TransformerConfig& config, const LayerSpec& spec) {
  const double std = config.init_method_std;
  nn::TransformerLayerShape shape{{config.hidden_size, config.num_attention_heads, config.num_query_groups,
                                   config.attention_dropout},
                                  config.ffn_hidden_size,
                                  config.hidden_dropout,
                                  config.layernorm_epsilon,
                                  std,
                                  std / std::sqrt(2.0 * static_cast<double>(config.num_layers))};
  shape.attention.bias = config.add_bias_linear;
  shape.attention.rotary.enabled = spec.self_attention.position == PositionEmbedding::rope;
  shape.attention.rotary.rotary_dim = config.rotary_dim();
  shape.attention.rotary.base = config.rotary_base;
  shape.attention.rotary.interleaved = config.rotary_interleaved;
  shape.attention.alibi = spec.self_attention.position == PositionEmbedding::alibi;
  shape.norm = spec.norm == Norm::rmsnorm ? nn::NormKind::rmsnorm : nn::NormKind::layernorm;
  shape.mlp.swiglu = (spec.mlp == Mlp::moe ? spec.expert_mlp : spec.mlp) == Mlp::swiglu;
  shape.mlp.bias = config.add_bias_linear;
  return shape;
}

// The MoE part of layer `layer`'s shape (num_experts 0: a dense layer; model.moe_layer_freq).
nn::MoeShape moe_shape(const TransformerConfig& c, int64_t layer) {
  nn::MoeShape moe;
  if (!c.is_moe_layer(layer)) return moe;
  moe.num_experts = c.num_experts;
  moe.expert_ffn_hidden_size = c.expert_ffn_hidden_size();
  moe.shared_ffn_hidden_size = c.moe_shared_expert_intermediate_size;
  moe.router = {c.moe_router_topk, ops::parse_router_score(c.moe_router_score_function), c.moe_router_pre_softmax};
  if (c.moe_router_load_balancing_type != "aux_loss" && c.moe_router_load_balancing_type != "none")
    TESSERA_CONFIG_FAIL("model.moe_router_load_balancing_type = '", c.moe_router_load_balancing_type,
                        "': allowed values are aux_loss, none");
  moe.aux_loss = c.moe_router_load_balancing_type == "aux_loss";
  moe.aux_loss_coeff = c.moe_aux_loss_coeff;
  moe.z_loss_coeff = c.moe_z_loss_coeff;
  moe.capacity_factor = c.moe_expert_capacity_factor;
  moe.pad_to_capacity = c.moe_pad_expert_input_to_capacity;
  return moe;
}
}  // namespace

GPTModel::GPTModel(const TransformerConfig& config, int64_t vocab_size, DType dtype, Device device,
                   std::vector<GPTChunkLayout> layouts, const parallel::TensorParallel& tp,
                   const nn::ExpertParallel& ep)
    : config_(config), tp_(tp), vocab_size_(vocab_size), loss_(std::make_shared<const LmLoss>()) {
  const LayerSpec spec = require_gpt_layer_spec(config);
  if (config.num_experts > 0 && device.is_cpu() && dtype != DType::f32)
    TESSERA_CONFIG_FAIL("model.num_experts = ", config.num_experts,
                        " is not supported yet on the CPU in bf16 / fp16 (the MoE layer runs fp32 on the CPU, "
                        "f32 / bf16 / fp16 on CUDA: set training.precision = fp32 or training.device = cuda)");
  if (config.num_experts > 0 && device.is_cuda() && ep.size > 1)
    TESSERA_CONFIG_FAIL("parallel.expert_model_parallel_size = ", ep.size,
                        " is not supported yet with training.device = cuda (the GPU MoE layer runs EP = 1)");
  if (ep.size > 1 && config.num_experts == 0)
    TESSERA_CONFIG_FAIL("parallel.expert_model_parallel_size = ", ep.size, " needs model.num_experts > 0");
  padded_vocab_ = models::padded_vocab_size(vocab_size, config.make_vocab_size_divisible_by, tp.size);
  const double std = config.init_method_std;
  const nn::TransformerLayerShape shape = layer_shape(config, spec);
  const bool learned_positions = spec.self_attention.position == PositionEmbedding::learned_absolute;
  const bool tied = !config.untie_embeddings_and_output_weights;
  TESSERA_CHECK(!layouts.empty(), "a GPT model needs at least one chunk");
  for (size_t c = 0; c < layouts.size(); ++c) {
    GPTChunkLayout layout = layouts[c];
    if (layout.num_layers < 0) layout.num_layers = config.num_layers - layout.first_layer;
    TESSERA_CHECK(layout.first_layer >= 0 && layout.first_layer + layout.num_layers <= config.num_layers,
                  "chunk ", c, " layers [", layout.first_layer, ", ", layout.first_layer + layout.num_layers,
                  ") outside the model's ", config.num_layers, " layers");
    if (layout.has_embedding) {
      TESSERA_CHECK(c == 0 && !embedding_, "only the first chunk of a rank can hold the embedding");
      const int first_param = static_cast<int>(store_.parameters().size());
      embedding_ = std::make_unique<nn::GPTEmbedding>(store_, padded_vocab_,
                                                      learned_positions ? config.max_position_embeddings : 0,
                                                      config.hidden_size, std, config.hidden_dropout, tp);
      embedding_params_ = {first_param, static_cast<int>(store_.parameters().size())};
      if (tied) {
        output_weight_ = embedding_->word_embeddings();
        store_.roles(output_weight_).tied_embedding = true;  // it is the output layer too
      }
    }
    Chunk chunk;
    chunk.layout = layout;
    chunk.layers.reserve(static_cast<size_t>(layout.num_layers));
    for (int64_t i = layout.first_layer; i < layout.first_layer + layout.num_layers; ++i) {
      const int first_param = static_cast<int>(store_.parameters().size());
      nn::TransformerLayerShape layer = shape;
      layer.moe = moe_shape(config, i);
      chunk.layers.emplace_back(store_, "decoder.layers." + std::to_string(i), layer, tp, ep);
      chunk.layer_params.emplace_back(first_param, static_cast<int>(store_.parameters().size()));
    }
    chunks_.push_back(std::move(chunk));
    if (layout.has_head) {
      TESSERA_CHECK(c + 1 == layouts.size(), "only the last chunk of a rank can hold the head");
      const int first_head_param = static_cast<int>(store_.parameters().size());
      final_layernorm_ = std::make_unique<nn::Norm>(store_, "decoder.final_layernorm", config.hidden_size,
                                                    config.layernorm_epsilon, shape.norm, tp.sequence_parallel);
      // Tied output layer: the word embedding itself, or (on a last stage without the embedding) a
      // copy kept equal to it through the embedding group, as Megatron's output_layer.weight.
      if (output_weight_ < 0)
        output_weight_ = store_.add("output_layer.weight", {padded_vocab_ / tp.size, config.hidden_size},
                                    nn::Init::normal, std, true,
                                    nn::Sharding::split(0, padded_vocab_, tp.size, tp.rank));
      if (!tied) {  // untied: the output layer is its own parameter, on the head's stage only
        store_.roles(output_weight_).vocab_axis = 0;
      } else if (output_weight_ == store_.index_of("output_layer.weight")) {
        nn::ParameterRoles& roles = store_.roles(output_weight_);
        roles.tied_embedding = true;
        roles.copy_of = "embedding.word_embeddings.weight";
        roles.vocab_axis = 0;
      }
      head_params_ = {first_head_param, static_cast<int>(store_.parameters().size())};
    }
  }
  store_.allocate(dtype, device);
  layer_stack_ = std::make_unique<nn::LayerStack>(nn::RecomputeConfig{}, device);
}

void GPTModel::set_recompute(const nn::RecomputeConfig& config) {
  for (size_t c = 0; c < chunks_.size(); ++c)
    nn::check_recompute_layers(config, chunks_[c].layout.num_layers,
                               "model chunk " + std::to_string(c) + " (layers " +
                                   std::to_string(chunks_[c].layout.first_layer) + " to " +
                                   std::to_string(chunks_[c].layout.first_layer + chunks_[c].layout.num_layers - 1) +
                                   ")");
  layer_stack_ = std::make_unique<nn::LayerStack>(config, store_.device());
}

void GPTModel::set_loss(std::shared_ptr<const TokenLoss> loss) {
  TESSERA_CHECK(loss != nullptr, "GPTModel::set_loss: no loss");
  loss_ = std::move(loss);
}

void GPTModel::require_single_chunk(const char* what) const {
  TESSERA_CHECK(chunks_.size() == 1 && chunks_[0].layout.has_embedding && chunks_[0].layout.has_head, what,
                " needs the whole model in one chunk");
}

DType GPTModel::loss_dtype() const { return store_.device().is_cuda() ? DType::f32 : store_.dtype(); }

GPTInputs GPTModel::prepare(Arena& arena, const MicroBatch& batch) const {
  const Tensor& tokens = batch.tokens;
  const Tensor& loss_mask = batch.loss_mask;
  TESSERA_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::i32 && tokens.device().is_cpu(),
                "tokens must be host i32 [b, s+1], got ", tokens.describe());
  GPTInputs in;
  in.batch = tokens.dim(0);
  in.seq = tokens.dim(1) - 1;
  TESSERA_CHECK(in.seq >= 1 && in.seq <= config_.max_position_embeddings, "sequence length ", in.seq,
                " outside [1, max_position_embeddings = ", config_.max_position_embeddings, "]");
  expect_tensor(loss_mask, DType::f32, {in.batch, in.seq}, "loss_mask");
  TESSERA_CHECK(loss_mask.device().is_cpu(), "loss_mask must be a host tensor, got ", loss_mask.describe());
  const size_t n = static_cast<size_t>(in.seq * in.batch);
  std::vector<int32_t> ids(n), positions(n), labels(n);
  std::vector<float> mask_rows(n);
  const int32_t* tok = tokens.data_as<int32_t>();
  const float* mask = loss_mask.data_as<float>();
  const int32_t* position_ids = nullptr;
  if (batch.position_ids.data()) {
    expect_tensor(batch.position_ids, DType::i32, {in.batch, in.seq}, "position_ids");
    TESSERA_CHECK(batch.position_ids.device().is_cpu(), "position_ids must be a host tensor");
    position_ids = batch.position_ids.data_as<int32_t>();
  }
  if (batch.document_ids.data()) {
    expect_tensor(batch.document_ids, DType::i32, {in.batch, in.seq}, "document_ids");
    TESSERA_CHECK(batch.document_ids.device().is_cpu(), "document_ids must be a host tensor");
    const int32_t* d = batch.document_ids.data_as<int32_t>();
    std::vector<int32_t> documents(d, d + in.batch * in.seq);
    in.document_ids = ops::upload(arena, documents).view({in.batch, in.seq});
  }
  for (int64_t s = 0; s < in.seq; ++s) {
    for (int64_t b = 0; b < in.batch; ++b) {
      const size_t row = static_cast<size_t>(s * in.batch + b);
      ids[row] = tok[b * (in.seq + 1) + s];
      labels[row] = tok[b * (in.seq + 1) + s + 1];
      positions[row] = position_ids ? position_ids[b * in.seq + s] : static_cast<int32_t>(s);
      mask_rows[row] = mask[b * in.seq + s];
    }
  }
  in.host_tokens.assign(tok, tok + in.batch * (in.seq + 1));
  in.host_loss_mask.assign(mask, mask + in.batch * in.seq);
  in.denominator = loss_->denominator(in.loss_inputs());
  // Out-of-range ids would read outside the tables on the GPU: reject them here, on the host.
  for (size_t i = 0; i < n; ++i)
    if (positions[i] < 0 || positions[i] >= config_.max_position_embeddings)
      TESSERA_FAIL("position id ", positions[i], " is outside [0, max_position_embeddings = ",
                   config_.max_position_embeddings, ")");
  for (size_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size_ || labels[i] < 0 || labels[i] >= vocab_size_)
      TESSERA_FAIL("token id ", ids[i] < 0 || ids[i] >= vocab_size_ ? ids[i] : labels[i], " in micro-batch row ",
                   i % static_cast<size_t>(in.batch), " is outside the vocabulary [0, ", vocab_size_, ")");
  in.ids = ops::upload(arena, ids);
  in.positions = ops::upload(arena, positions);
  in.labels = ops::upload(arena, labels);
  Tensor mask_f32 = ops::upload(arena, mask_rows);
  if (loss_dtype() == DType::f32) {
    in.mask = mask_f32;
  } else {
    in.mask = arena.allocate(loss_dtype(), {static_cast<int64_t>(n)});
    ops::copy(mask_f32, in.mask);
  }
  return in;
}

Tensor GPTModel::forward_chunk(int c, Arena& arena, const GPTInputs& in, const Tensor& input,
                               const Tensor& key_padding_mask, const nn::DropoutContext& dropout,
                               GPTChunkActivations& acts) const {
  const Chunk& chunk = chunks_.at(c);
  Tensor x;
  if (chunk.layout.has_embedding) {
    x = embedding_->forward(arena, in.ids, in.positions, dropout);
  } else {
    TESSERA_CHECK(input.data() != nullptr, "chunk ", c, " needs the previous chunk's output");
    x = input;
  }
  acts.input = input;
  x = layer_stack_->forward(chunk.layers, arena, x, in.seq, in.batch, key_padding_mask, dropout, acts.layers,
                            in.positions, in.document_ids);
  if (dropout.training && config_.num_experts > 0) record_moe_stats(chunk, in, acts);
  if (!chunk.layout.has_head) return x;
  Tensor normed = final_layernorm_->forward(arena, x, acts.final_ln);
  // The output layer is column-parallel over the vocabulary, its output not gathered.
  acts.final_hidden = tp_.sequence_parallel ? parallel::gather_from_sp_forward(arena, normed, tp_)
                                            : parallel::copy_to_tp_forward(normed, tp_);
  return acts.final_hidden;
}

Tensor GPTModel::output_logits(Arena& arena, GPTChunkActivations& acts) const {
  TESSERA_CHECK(acts.final_hidden.defined(), "output_logits before the head chunk's forward");
  acts.logits = arena.allocate(store_.dtype(), {acts.final_hidden.dim(0), padded_vocab_ / tp_.size});
  ops::linear_forward(acts.final_hidden, store_.value(output_weight_), Tensor(), acts.logits);
  return acts.logits;
}

Tensor GPTModel::scaled_dlosses(Arena& arena, const GPTChunkActivations& acts, double grad_scale) const {
  Tensor scaled = arena.allocate(loss_dtype(), acts.dlosses.shape());
  ops::copy(acts.dlosses, scaled);
  ops::scale_inplace(scaled, grad_scale);
  return scaled;
}

int64_t GPTModel::output_chunk_rows(int64_t tokens, int64_t layer_bytes) const {
  if (output_chunk_rows_ > 0) return std::min(tokens, output_chunk_rows_);
  const int64_t row_bytes = padded_vocab_ / tp_.size * static_cast<int64_t>(dtype_size(store_.dtype()));
  const int64_t fitting = std::max<int64_t>(1, layer_bytes / row_bytes);
  const int64_t chunks = (tokens + fitting - 1) / fitting;
  return (tokens + chunks - 1) / chunks;  // even chunks
}

void GPTModel::output_layer_pass(const GPTInputs& in, GPTChunkActivations& acts, const Tensor& losses,
                                 const Tensor& dlosses_scaled) const {
  const int64_t n = in.seq * in.batch;
  const int64_t rows = output_chunk_rows(n, activation_memory(in.seq, in.batch).per_layer_none);
  const int64_t vocab_start = vocab_start_of_rank();
  const Tensor& weight = store_.value(output_weight_);
  Arena& scratch = layer_stack_->head_scratch();
  scratch.reset();
  const Tensor logits_buffer = scratch.allocate(store_.dtype(), {rows, padded_vocab_ / tp_.size});
  const Tensor lse_buffer = scratch.allocate(loss_dtype(), {rows});
  for (int64_t begin = 0; begin < n; begin += rows) {
    const int64_t end = std::min(n, begin + rows);
    const Tensor logits = logits_buffer.rows(0, end - begin), lse = lse_buffer.rows(0, end - begin);
    const Tensor hidden = acts.final_hidden.rows(begin, end), labels = in.labels.rows(begin, end);
    ops::linear_forward(hidden, weight, Tensor(), logits);
    if (!dlosses_scaled.defined()) {
      parallel::vocab_parallel_cross_entropy_forward(logits, labels, vocab_start, vocab_size_, tp_,
                                                     losses.rows(begin, end), lse);
      continue;
    }
    // The logits' gradient overwrites them (each element's depends on that element, the row's
    // log-sum-exp and dloss only).
    parallel::vocab_parallel_cross_entropy_forward_backward(logits, labels, dlosses_scaled.rows(begin, end),
                                                            vocab_start, vocab_size_, tp_, losses.rows(begin, end),
                                                            lse, logits);
    ops::linear_backward(logits, hidden, weight, acts.dhidden.rows(begin, end), store_.grad(output_weight_),
                         Tensor());
  }
  scratch.reset();
}

LossSum GPTModel::chunk_loss(Arena& arena, const GPTInputs& in, const GPTChunkActivations& acts_in,
                             std::optional<double> backward_grad_scale) const {
  auto& acts = const_cast<GPTChunkActivations&>(acts_in);
  const int64_t n = in.seq * in.batch;
  Tensor losses = arena.allocate(loss_dtype(), {n});
  acts.dlosses = arena.allocate(loss_dtype(), {n});
  const bool keep_logits =
      acts.logits.defined() ||
      (backward_grad_scale && !loss_->gradient_before_losses(arena, in.loss_inputs(), in.mask, acts.dlosses));
  if (keep_logits) {  // the whole logits, their log-sum-exp for backward_chunk
    if (!acts.logits.defined()) output_logits(arena, acts);
    acts.log_sum_exp = arena.allocate(loss_dtype(), {n});
    parallel::vocab_parallel_cross_entropy_forward(acts.logits, in.labels, vocab_start_of_rank(),
                                                   vocab_size_, tp_, losses, acts.log_sum_exp);
  } else if (backward_grad_scale) {
    // d(loss_sum * grad_scale) / d(token loss), then the output layer's backward chunk by chunk.
    const Tensor dlosses_scaled = scaled_dlosses(arena, acts, *backward_grad_scale);
    acts.dhidden = arena.allocate(store_.dtype(), acts.final_hidden.shape());
    acts.head_grad_scale = *backward_grad_scale;
    output_layer_pass(in, acts, losses, dlosses_scaled);
  } else {
    output_layer_pass(in, acts, losses, Tensor());
  }
  LossTerms terms = loss_->forward(arena, in.loss_inputs(), in.mask, losses, acts.dlosses);
  return {terms.loss_sum, in.denominator, std::move(terms.metric_sums)};
}

Tensor GPTModel::backward_chunk(int c, Arena& arena, const GPTInputs& in, const Tensor& doutput, double grad_scale,
                                const nn::DropoutContext& dropout, const GPTChunkActivations& acts,
                                const std::function<void(int, int)>& grads_final) const {
  const Chunk& chunk = chunks_.at(c);
  Tensor dx = doutput;
  if (chunk.layout.has_head) {
    Tensor dhidden = acts.dhidden;  // chunk_loss ran the output layer's backward
    if (dhidden.defined()) {
      TESSERA_CHECK(grad_scale == acts.head_grad_scale, "the head's backward ran in chunk_loss with grad_scale ",
                    acts.head_grad_scale, ", backward_chunk got ", grad_scale);
    } else {
      TESSERA_CHECK(acts.logits.defined() && acts.log_sum_exp.defined(),
                    "backward_chunk of the head without chunk_loss's training pass");
      const Tensor dlosses = scaled_dlosses(arena, acts, grad_scale);
      // The logits are not read after this: their gradient overwrites them in place.
      const Tensor& dlogits = acts.logits;
      parallel::vocab_parallel_cross_entropy_backward(acts.logits, in.labels, acts.log_sum_exp, dlosses,
                                                      vocab_start_of_rank(), vocab_size_, tp_,
                                                      dlogits);
      dhidden = arena.allocate(store_.dtype(), acts.final_hidden.shape());
      ops::linear_backward(dlogits, acts.final_hidden, store_.value(output_weight_), dhidden,
                           store_.grad(output_weight_), Tensor());
    }
    Tensor dnormed = tp_.sequence_parallel ? parallel::gather_from_sp_backward(arena, dhidden, tp_)
                                           : parallel::copy_to_tp_backward(arena, dhidden, tp_);
    dx = final_layernorm_->backward(arena, dnormed, acts.final_ln);
    // The head's own parameters are final (a tied output weight is the embedding's, final later).
    if (grads_final) grads_final(head_params_.first, head_params_.second);
  }
  // The router losses of this micro-batch weigh its loss denominator's share of the step's (grad_scale
  // carries 1 / the step's denominator): the step's objective is sum_mb (lm_sum + aux x den) / sum den.
  dx = layer_stack_->backward(
      chunk.layers, arena, dx, in.seq, in.batch, dropout, acts.layers,
      [&](size_t i) {
        if (grads_final) grads_final(chunk.layer_params[i].first, chunk.layer_params[i].second);
      },
      grad_scale * in.denominator);
  if (!chunk.layout.has_embedding) return dx;
  embedding_->backward(arena, dx, in.ids, in.positions, dropout);
  if (grads_final) grads_final(embedding_params_.first, embedding_params_.second);
  return Tensor();
}

void GPTModel::record_moe_stats(const Chunk& chunk, const GPTInputs& in, const GPTChunkActivations& acts) const {
  const auto layers = static_cast<size_t>(config_.num_layers);
  if (moe_stats_.aux_loss.empty()) {
    moe_stats_.aux_loss.assign(layers, 0.0);
    moe_stats_.z_loss.assign(layers, 0.0);
    moe_stats_.routed.assign(layers, std::vector<double>(static_cast<size_t>(config_.num_experts), 0.0));
    moe_stats_.dropped.assign(layers, 0.0);
  }
  for (size_t i = 0; i < chunk.layers.size() && i < acts.layers.layers.size(); ++i) {
    const nn::MoeLayer::Saved& saved = acts.layers.layers[i].moe;
    if (!chunk.layers[i].moe() || saved.routed.empty()) continue;
    const auto layer = static_cast<size_t>(chunk.layout.first_layer) + i;
    moe_stats_.aux_loss[layer] += saved.aux_loss * in.denominator;
    moe_stats_.z_loss[layer] += saved.z_loss * in.denominator;
    moe_stats_.dropped[layer] += static_cast<double>(saved.dropped);
    for (size_t e = 0; e < saved.routed.size(); ++e) moe_stats_.routed[layer][e] += static_cast<double>(saved.routed[e]);
  }
}

MoeStepStats GPTModel::take_moe_stats() {
  MoeStepStats stats = std::move(moe_stats_);
  moe_stats_ = MoeStepStats{};
  return stats;
}

std::vector<Shape> GPTModel::stage_shapes(int64_t seq, int64_t batch) const {
  return {{tp_.local_rows(seq * batch), config_.hidden_size}};
}

std::unique_ptr<MicroBatchInputs> GPTModel::prepare_micro_batch(Arena& arena, const MicroBatch& batch) const {
  return std::make_unique<GPTInputs>(prepare(arena, batch));
}

std::unique_ptr<ChunkActivations> GPTModel::make_activations() const { return std::make_unique<GPTChunkActivations>(); }

namespace {
const GPTInputs& gpt_inputs(const MicroBatchInputs& in) {
  const auto* gpt = dynamic_cast<const GPTInputs*>(&in);
  TESSERA_CHECK(gpt != nullptr, "GPTModel was given another model's micro-batch inputs");
  return *gpt;
}
const GPTChunkActivations& gpt_activations(const ChunkActivations& acts) {
  const auto* gpt = dynamic_cast<const GPTChunkActivations*>(&acts);
  TESSERA_CHECK(gpt != nullptr, "GPTModel was given another model's activations");
  return *gpt;
}
Tensor single(const StageTensors& tensors, const char* what) {
  TESSERA_CHECK(tensors.size() <= 1, "a GPT stage passes one tensor, got ", tensors.size(), " ", what);
  return tensors.empty() ? Tensor() : tensors[0];
}
}  // namespace

StageTensors GPTModel::forward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& input,
                                     const nn::DropoutContext& dropout, ChunkActivations& acts) const {
  auto& gpt_acts = const_cast<GPTChunkActivations&>(gpt_activations(acts));
  Tensor out = forward_chunk(chunk, arena, gpt_inputs(in), single(input, "inputs"), Tensor(), dropout, gpt_acts);
  if (chunks_.at(chunk).layout.has_head) return {};  // the logits: stage_logits, or chunk by chunk in stage_loss
  return {out};
}

Tensor GPTModel::stage_logits(Arena& arena, const MicroBatchInputs&, ChunkActivations& acts,
                              const StageTensors&) const {
  return output_logits(arena, const_cast<GPTChunkActivations&>(gpt_activations(acts)));
}

LossSum GPTModel::stage_loss(Arena& arena, const MicroBatchInputs& in, ChunkActivations& acts,
                             std::optional<double> backward_grad_scale) const {
  return chunk_loss(arena, gpt_inputs(in), gpt_activations(acts), backward_grad_scale);
}

StageTensors GPTModel::backward_stage(int chunk, Arena& arena, const MicroBatchInputs& in, const StageTensors& doutput,
                                      double grad_scale, const nn::DropoutContext& dropout,
                                      const ChunkActivations& acts,
                                      const std::function<void(int, int)>& grads_final) const {
  Tensor dinput = backward_chunk(chunk, arena, gpt_inputs(in), single(doutput, "output gradients"), grad_scale,
                                 dropout, gpt_activations(acts), grads_final);
  return dinput.data() ? StageTensors{dinput} : StageTensors{};
}

LossSum GPTModel::forward_backward(Arena& arena, const Tensor& tokens, const Tensor& loss_mask, double grad_scale,
                                   const nn::DropoutContext& dropout) {
  require_single_chunk("forward_backward");
  GPTInputs in = prepare(arena, {tokens, loss_mask, Tensor(), Tensor()});
  GPTChunkActivations acts;
  forward_chunk(0, arena, in, Tensor(), Tensor(), dropout, acts);
  if (in.denominator <= 0) return chunk_loss(arena, in, acts, std::nullopt);  // no gradient
  LossSum result = chunk_loss(arena, in, acts, grad_scale / in.denominator);
  backward_chunk(0, arena, in, Tensor(), grad_scale / in.denominator, dropout, acts);
  return result;
}

LossSum GPTModel::forward_loss(Arena& arena, const Tensor& tokens, const Tensor& loss_mask) {
  require_single_chunk("forward_loss");
  GPTInputs in = prepare(arena, {tokens, loss_mask, Tensor(), Tensor()});
  GPTChunkActivations acts;
  forward_chunk(0, arena, in, Tensor(), Tensor(), nn::DropoutContext{}, acts);
  return chunk_loss(arena, in, acts, std::nullopt);
}

Tensor GPTModel::forward_logits(Arena& arena, const Tensor& ids, const Tensor& key_padding_mask,
                                const Tensor& position_ids) {
  require_single_chunk("forward_logits");
  TESSERA_CHECK(ids.ndim() == 2 && ids.dtype() == DType::i32, "ids must be i32 [b, s], got ", ids.describe());
  int64_t batch = ids.dim(0), seq = ids.dim(1);
  GPTInputs in;
  in.batch = batch;
  in.seq = seq;
  TESSERA_CHECK(ids.device().is_cpu(), "ids must be a host tensor, got ", ids.describe());
  std::vector<int32_t> row_ids(static_cast<size_t>(seq * batch)), row_positions(row_ids.size());
  const int32_t* src = ids.data_as<int32_t>();
  const int32_t* pos_src = position_ids.data() ? position_ids.data_as<int32_t>() : nullptr;
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t b = 0; b < batch; ++b) {
      row_ids[static_cast<size_t>(s * batch + b)] = src[b * seq + s];
      row_positions[static_cast<size_t>(s * batch + b)] = pos_src ? pos_src[b * seq + s] : static_cast<int32_t>(s);
    }
  }
  in.ids = ops::upload(arena, row_ids);
  in.positions = ops::upload(arena, row_positions);
  GPTChunkActivations acts;
  forward_chunk(0, arena, in, Tensor(), key_padding_mask, nn::DropoutContext{}, acts);
  Tensor logits = parallel::gather_from_tp_last_dim_forward(arena, output_logits(arena, acts), tp_);
  return logits.view({seq, batch, padded_vocab_});
}

GPTKvCache GPTModel::allocate_kv_cache(Arena& arena, int64_t batch, int64_t capacity) const {
  TESSERA_CHECK(batch > 0 && capacity > 0 && capacity <= config_.max_position_embeddings, "KV cache of ", batch,
                " sequences x ", capacity, " tokens: both must be positive and the length at most max_position_embeddings = ",
                config_.max_position_embeddings);
  GPTKvCache cache;
  cache.batch = batch;
  cache.capacity = capacity;
  if (arena.device().is_cuda()) cache.past_device = arena.allocate(DType::i32, {1});
  for (const Chunk& chunk : chunks_) {
    std::vector<nn::KvCacheSlot> slots;
    for (const nn::TransformerLayer& layer : chunk.layers)
      slots.push_back({arena.allocate(store_.dtype(), {batch, capacity, layer.kv_width()}),
                       arena.allocate(store_.dtype(), {batch, capacity, layer.kv_width()}), cache.past_device});
    cache.chunks.push_back(std::move(slots));
  }
  return cache;
}

Tensor GPTModel::forward_cached(int c, Arena& arena, const Tensor& ids, const Tensor& positions, const Tensor& input,
                                const Tensor& key_mask, const GPTKvCache& cache, int64_t past, int64_t tokens,
                                bool last_only) const {
  const Chunk& chunk = chunks_.at(c);
  TESSERA_CHECK(c < static_cast<int>(cache.chunks.size()), "the KV cache has no chunk ", c);
  TESSERA_CHECK(!tp_.sequence_parallel, "generation does not run with sequence parallelism");
  const int64_t batch = cache.batch;
  Tensor x;
  if (chunk.layout.has_embedding) {
    x = embedding_->forward(arena, ids, positions, nn::DropoutContext{});
  } else {
    TESSERA_CHECK(input.data() != nullptr, "chunk ", c, " needs the previous stage's hidden state");
    x = input;
  }
  for (size_t i = 0; i < chunk.layers.size(); ++i)
    x = chunk.layers[i].forward_cached(arena, x, tokens, batch, key_mask, cache.chunks[c][i], past, positions);
  if (!chunk.layout.has_head) return x;
  if (last_only) x = x.rows((tokens - 1) * batch, tokens * batch);
  nn::Norm::Saved ln;
  Tensor hidden = parallel::copy_to_tp_forward(final_layernorm_->forward(arena, x, ln), tp_);
  Tensor logits = arena.allocate(store_.dtype(), {x.dim(0), padded_vocab_ / tp_.size});
  ops::linear_forward(hidden, store_.value(output_weight_), Tensor(), logits);
  return parallel::gather_from_tp_last_dim_forward(arena, logits, tp_);
}

}  // namespace tessera::models
