#include "tessera/optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>

#include "tessera/ops/adamw.h"
#include "tessera/ops/elementwise.h"
#include "tessera/optim/grad_clip.h"
#include "tessera/optim/param_groups.h"

namespace tessera::optim {

namespace {
// A parameter's 1-D element range [offset, offset + count).
Tensor flat_range(const Tensor& t, int64_t offset, int64_t count) { return t.flat().rows(offset, offset + count); }

template <typename P>
bool tensor_parallel_from_metadata(const P& p, int tp_size) {
  return tp_size > 1 && p.split_axis >= 0;  // ParameterStore metadata: -1 = replicated over TP
}
}  // namespace

bool is_tensor_parallel_parameter(const nn::Parameter& p, int tp_size) {
  return tensor_parallel_from_metadata(p, tp_size);
}

std::vector<bool> grad_norm_counted_params(const nn::ParameterStore& store, int tp_size, int tp_rank) {
  std::vector<bool> counted;
  const bool has_word_embedding = store.index_of("embedding.word_embeddings.weight") >= 0;
  for (const auto& p : store.parameters()) {
    const bool shared_duplicate = p.name == "output_layer.weight" && !has_word_embedding;
    counted.push_back(!shared_duplicate && (tp_rank == 0 || is_tensor_parallel_parameter(p, tp_size)));
  }
  return counted;
}

DistributedOptimizer::DistributedOptimizer(nn::ParameterStore& store, parallel::ParallelContext& context,
                                           const DistributedOptimizerOptions& options, std::vector<bool> weight_decay,
                                           std::vector<bool> counted_in_grad_norm)
    : store_(store),
      context_(context),
      options_(options),
      weight_decay_(std::move(weight_decay)),
      counted_(std::move(counted_in_grad_norm)) {
  const size_t n = store_.parameters().size();
  TESSERA_CHECK(weight_decay_.size() == n && counted_.size() == n, "DistributedOptimizer: ", n,
                " parameters but ", weight_decay_.size(), " weight-decay flags and ", counted_.size(),
                " grad-norm flags");
  const DType dt = store_.dtype();
  TESSERA_CHECK(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16, "DistributedOptimizer: model params are ",
                dtype_name(dt), "; supported are f32, bf16 and f16 (fp32 main params are kept here)");
  parallel::GradBufferOptions layout;
  layout.data_parallel_size = context_.dp_size();
  layout.pad_for_sharding = options_.shard_over_data_parallel;
  layout.bucket_size = options_.bucket_size;
  layout.own_bucket = options_.own_bucket;
  grad_buffer_ = std::make_unique<parallel::GradBuffer>(store_, layout);
  reducer_ = std::make_unique<parallel::DataParallelGradReducer>(
      *grad_buffer_, context_.data(),
      options_.shard_over_data_parallel ? parallel::GradReduction::reduce_scatter : parallel::GradReduction::all_reduce);
  if (options_.dynamic_loss_scaling) scaler_ = std::make_unique<DynamicGradScaler>(options_.scaler);

  // The owned segments: every (parameter n owned range of a bucket), in buffer order.
  const auto& buckets = grad_buffer_->buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int64_t owned_start = reducer_->owned_start(static_cast<int>(b));
    const int64_t owned_end = owned_start + reducer_->owned_numel(static_cast<int>(b));
    std::vector<int> params = buckets[b].params;
    std::sort(params.begin(), params.end(),
              [&](int x, int y) { return grad_buffer_->param_start(x) < grad_buffer_->param_start(y); });
    for (int p : params) {
      const int64_t start = grad_buffer_->param_start(p);
      const int64_t end = start + store_.parameters()[p].value.numel();
      const int64_t lo = std::max(start, owned_start), hi = std::min(end, owned_end);
      if (lo >= hi) continue;
      segments_.push_back({p, lo - start, lo, local_numel_ + (lo - owned_start), hi - lo});
    }
    local_numel_ += owned_end - owned_start;
  }
  state_ = Buffer(3 * static_cast<size_t>(local_numel_) * sizeof(float), store_.device());
  if (options_.shard_over_data_parallel)
    gather_buffer_ = Buffer(static_cast<size_t>(grad_buffer_->numel()) * dtype_size(dt), store_.device());
  // fp32 main params start as the model's params (converted from bf16 / fp16).
  const Tensor main = main_params();
  for (const auto& s : segments_)
    ops::copy(flat_range(store_.value(s.param), s.param_offset, s.numel), flat_range(main, s.local_offset, s.numel));
}

void DistributedOptimizer::set_step_count(int64_t steps) {
  TESSERA_CHECK(steps >= 0, "DistributedOptimizer: step count ", steps, " must be >= 0");
  step_count_ = steps;
}

Tensor DistributedOptimizer::main_params() const { return state_.as_tensor(DType::f32, {local_numel_}, 0); }
Tensor DistributedOptimizer::exp_avg() const {
  return state_.as_tensor(DType::f32, {local_numel_}, static_cast<size_t>(local_numel_) * sizeof(float));
}
Tensor DistributedOptimizer::exp_avg_sq() const {
  return state_.as_tensor(DType::f32, {local_numel_}, 2 * static_cast<size_t>(local_numel_) * sizeof(float));
}

void DistributedOptimizer::global_grad_stats(double& norm_sq, bool& found_inf) {
  double local_sq = 0, local_nonfinite = 0;
  for (const auto& s : segments_) {
    const double sq = ops::sum_of_squares(grad_buffer_->range(s.buffer_offset, s.numel));
    if (!std::isfinite(sq)) local_nonfinite += 1;
    if (counted_[s.param]) local_sq += sq;
  }
  // Sharded: disjoint shards over DP and disjoint counted params over TP x PP -> sum over the world.
  // Not sharded: DP replicas hold the same reduced grads -> sum over the model-parallel group.
  Communicator& group = options_.shard_over_data_parallel ? context_.world() : context_.model();
  if (group.size() > 1) {
    // f32 transport of a double: high and low parts (only the f32 sums round, ~1e-7 relative).
    Buffer stats_buffer(3 * sizeof(float), Device::cpu());
    Tensor stats = stats_buffer.as_tensor(DType::f32, {3});
    float* v = stats.data_as<float>();
    v[0] = static_cast<float>(local_sq);
    v[1] = std::isfinite(local_sq) ? static_cast<float>(local_sq - static_cast<double>(v[0])) : 0.0f;
    v[2] = static_cast<float>(local_nonfinite);
    group.all_reduce(stats, ReduceOp::sum);
    norm_sq = static_cast<double>(v[0]) + static_cast<double>(v[1]);
    found_inf = v[2] > 0 || !std::isfinite(norm_sq);
  } else {
    norm_sq = local_sq;
    found_inf = local_nonfinite > 0;
  }
}

OptimizerStepResult DistributedOptimizer::step(double lr, double weight_decay, double beta1, double beta2, double eps,
                                               double clip_grad) {
  OptimizerStepResult result;
  result.loss_scale = loss_scale();
  reducer_->reduce_all(store_);
  if (scaler_) {  // main grads carry the loss scale: unscale the owned elements
    const double inverse = scaler_->inverse_scale();
    for (const auto& s : segments_) ops::scale_inplace(grad_buffer_->range(s.buffer_offset, s.numel), inverse);
  }
  double norm_sq = 0;
  bool found_inf = false;
  global_grad_stats(norm_sq, found_inf);
  result.grad_norm = std::sqrt(norm_sq);
  if (scaler_) scaler_->update(found_inf);
  if (found_inf || !std::isfinite(result.grad_norm)) {
    result.skipped = true;
    return result;
  }
  const double coefficient = clip_coefficient(result.grad_norm, clip_grad);
  if (coefficient != 1.0)
    for (const auto& s : segments_) ops::scale_inplace(grad_buffer_->range(s.buffer_offset, s.numel), coefficient);

  ++step_count_;
  ops::AdamWParams hyper;
  hyper.lr = lr;
  hyper.beta1 = beta1;
  hyper.beta2 = beta2;
  hyper.eps = eps;
  hyper.step = step_count_;
  const Tensor main = main_params(), m = exp_avg(), v = exp_avg_sq();
  for (const auto& s : segments_) {
    hyper.weight_decay = weight_decay_[s.param] ? weight_decay : 0.0;
    ops::adamw_update(flat_range(main, s.local_offset, s.numel), grad_buffer_->range(s.buffer_offset, s.numel),
                      flat_range(m, s.local_offset, s.numel), flat_range(v, s.local_offset, s.numel), hyper);
  }
  write_back_params();
  return result;
}

void DistributedOptimizer::write_back_params() {
  const Tensor main = main_params();
  if (!options_.shard_over_data_parallel) {
    for (const auto& s : segments_)
      ops::copy(flat_range(main, s.local_offset, s.numel), flat_range(store_.value(s.param), s.param_offset, s.numel));
    return;
  }
  // Sharded: write the owned slices into the gather buffer (model dtype, GradBuffer layout),
  // all-gather every bucket over DP, then copy each parameter into the model.
  const DType dt = store_.dtype();
  const Tensor gathered = gather_buffer_.as_tensor(dt, {grad_buffer_->numel()});
  for (const auto& s : segments_)
    ops::copy(flat_range(main, s.local_offset, s.numel), flat_range(gathered, s.buffer_offset, s.numel));
  Communicator& dp = context_.data();
  const auto& buckets = grad_buffer_->buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Tensor full = flat_range(gathered, buckets[b].start, buckets[b].numel);
    const int64_t shard = buckets[b].numel / dp.size();
    if (dp.size() > 1) dp.all_gather(flat_range(full, dp.rank() * shard, shard), full);
  }
  dp.synchronize();
  for (size_t i = 0; i < store_.parameters().size(); ++i) {
    const Tensor& value = store_.value(static_cast<int>(i));
    ops::copy(flat_range(gathered, grad_buffer_->param_start(static_cast<int>(i)), value.numel()), value.flat());
  }
}

}  // namespace tessera::optim

namespace tessera::optim {

DType model_param_dtype(const std::string& precision) {
  if (precision == "fp32") return DType::f32;
  if (precision == "bf16") return DType::bf16;
  if (precision == "fp16") return DType::f16;
  TESSERA_CONFIG_FAIL("training.precision = \"", precision, "\" is not one of fp32 | bf16 | fp16");
}

void initialize_params_through_f32(nn::ParameterStore& store, uint64_t seed) {
  if (store.dtype() == DType::f32 || store.dtype() == DType::f64) {
    store.initialize(seed);
    return;
  }
  nn::ParameterStore f32_store;
  for (const auto& p : store.parameters()) {
    nn::Sharding sharding;
    if (p.split_axis >= 0) {
      sharding.split_axis = p.split_axis;
      sharding.split_offset = p.split_offset;
      sharding.global_axis_size = p.global_shape[static_cast<size_t>(p.split_axis)];
    }
    sharding.sequence_parallel = p.sequence_parallel;
    f32_store.add(p.name, p.shape, p.init, p.init_std, p.weight_decay, sharding);
  }
  f32_store.allocate(DType::f32, Device::cpu());
  f32_store.initialize(seed);
  ops::copy(f32_store.all_values(), store.all_values());
}

std::unique_ptr<DistributedOptimizer> make_training_optimizer(const train::Config& config, nn::ParameterStore& store,
                                                              parallel::ParallelContext& context) {
  const bool mixed = config.training.precision != "fp32";
  const bool distributed = config.parallel.use_distributed_optimizer;
  if (!mixed && !distributed && context.dp_size() == 1 && context.tp_size() == 1 && context.pp_size() == 1)
    return nullptr;
  DistributedOptimizerOptions options;
  options.shard_over_data_parallel = distributed;
  options.dynamic_loss_scaling = config.training.precision == "fp16";
  // The tied word embedding is reduced over the embedding group too: bucket it alone when pp > 1.
  if (context.pp_size() > 1)
    for (const char* name : {"embedding.word_embeddings.weight", "output_layer.weight"})
      if (store.index_of(name) >= 0) options.own_bucket.push_back(name);
  std::vector<bool> weight_decay;
  for (const auto& p : store.parameters()) weight_decay.push_back(default_weight_decay(p.name, p.shape));
  return std::make_unique<DistributedOptimizer>(store, context, options, std::move(weight_decay),
                                                grad_norm_counted_params(store, context.tp_size(), context.tp_rank()));
}

}  // namespace tessera::optim
