#include "tessera/optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>

#include "tessera/ops/adamw.h"
#include "tessera/ops/multi_tensor.h"
#include "tessera/ops/elementwise.h"
#include "tessera/optim/grad_clip.h"
#include "tessera/optim/param_groups.h"

namespace tessera::optim {

namespace {
// stats_device_ / stats_host_: f64 [2] local {sum of squares, non-finite} at 0, f32 [3] packed at 16.
constexpr size_t kPackedOffset = 2 * sizeof(double);
constexpr size_t kStatsBytes = kPackedOffset + 4 * sizeof(float);

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
  for (const auto& p : store.parameters()) {
    const bool shared_duplicate = !p.roles.copy_of.empty();
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
  bool has_experts = false;
  for (const auto& p : store_.parameters()) has_experts |= p.roles.reduce_group == nn::ReduceGroup::expert_data;
  if (has_experts) layout.expert_data_parallel_size = context_.grid().expert_data_size();
  grad_buffer_ = std::make_unique<parallel::GradBuffer>(store_, layout);
  // f32 gradients (fp32 models; bf16 / f16 on a GPU, whose kernels accumulate into f32) are kept in
  // the gradient buffer itself rather than copied there: one f32 gradient per parameter, as Megatron's
  // main_grad, instead of two (4 bytes a parameter: 5.8 GiB at the 1.5B shape).
  if (store_.grad_dtype() == DType::f32) {
    std::vector<Tensor> views;
    for (size_t p = 0; p < n; ++p) views.push_back(grad_buffer_->param_grad(static_cast<int>(p)));
    store_.use_external_grads(grad_buffer_->all(), views);
  }
  reducer_ = std::make_unique<parallel::DataParallelGradReducer>(
      *grad_buffer_, context_.data(),
      options_.shard_over_data_parallel ? parallel::GradReduction::reduce_scatter : parallel::GradReduction::all_reduce,
      has_experts ? &context_.group(GroupKind::expert_data) : nullptr);
  // With experts and without sharding, DP replicas no longer all hold every parameter (each EP rank
  // its experts): count dense grads on DP rank 0 and expert grads on expert-data rank 0 only, and sum
  // the norm over the world, so every gradient is counted once.
  if (has_experts && !options_.shard_over_data_parallel) {
    norm_over_world_ = true;
    for (size_t p = 0; p < n; ++p) {
      const bool expert = store_.parameters()[p].roles.reduce_group == nn::ReduceGroup::expert_data;
      if (expert ? context_.grid().expert_data_rank() != 0 : context_.dp_rank() != 0) counted_[p] = false;
    }
  }
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
  stats_device_ = Buffer(kStatsBytes, store_.device());
  stats_host_ = Buffer(kStatsBytes, Device::cpu());
  build_segment_tables();
  // fp32 main params start as the model's params (converted from bf16 / fp16): one segmented copy.
  std::vector<ops::TensorSegment> initial;
  for (const auto& s : segments_)
    initial.push_back({store_value_offset(s.param) + s.param_offset, s.local_offset, 0, s.numel, 0});
  ops::segmented_convert(store_.all_values(), main_params(), ops::SegmentTable(std::move(initial), store_.device()));
}

int64_t DistributedOptimizer::store_value_offset(int param) const {
  const auto* base = static_cast<const char*>(store_.all_values().data());
  const auto bytes = static_cast<const char*>(store_.value(param).data()) - base;
  const auto element = static_cast<std::ptrdiff_t>(dtype_size(store_.dtype()));
  TESSERA_CHECK(bytes >= 0 && bytes % element == 0, "DistributedOptimizer: parameter '",
                store_.parameters()[param].name, "' is not inside the store's value buffer");
  return static_cast<int64_t>(bytes / element);
}

void DistributedOptimizer::build_segment_tables() {
  const bool sharded = options_.shard_over_data_parallel;
  std::vector<ops::TensorSegment> stats, adamw;
  for (const auto& s : segments_) {
    stats.push_back({s.buffer_offset, 0, 0, s.numel, counted_[s.param] ? ops::kSegmentCountedInNorm : 0u});
    // Sharded: the owned slice goes to the gather buffer (GradBuffer layout); else to the model param.
    const int64_t dst = sharded ? s.buffer_offset : store_value_offset(s.param) + s.param_offset;
    adamw.push_back({s.buffer_offset, dst, s.local_offset, s.numel, weight_decay_[s.param] ? ops::kSegmentWeightDecay : 0u});
  }
  stats_table_ = ops::SegmentTable(std::move(stats), store_.device());
  adamw_table_ = ops::SegmentTable(std::move(adamw), store_.device());
  if (sharded) {
    std::vector<ops::TensorSegment> gather;
    for (size_t i = 0; i < store_.parameters().size(); ++i) {
      const int p = static_cast<int>(i);
      gather.push_back({grad_buffer_->param_start(p), store_value_offset(p), 0, store_.value(p).numel(), 0});
    }
    gather_to_model_table_ = ops::SegmentTable(std::move(gather), store_.device());
  }
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

void DistributedOptimizer::global_grad_stats(double unscale, double& norm_sq, bool& found_inf) {
  const Tensor local = stats_device_.as_tensor(DType::f64, {2});
  ops::segmented_grad_stats(grad_buffer_->all(), stats_table_, unscale, local);
  // Sharded: disjoint shards over DP and disjoint counted params over TP x PP -> sum over the world.
  // Not sharded: DP replicas hold the same reduced grads -> sum over the model-parallel group.
  Communicator& group = options_.shard_over_data_parallel || norm_over_world_ ? context_.world() : context_.model();
  if (group.size() > 1) {
    // f32 transport of a double: high and low parts (only the f32 sums round, ~1e-7 relative), in a
    // tensor on the store's device (NCCL takes device tensors).
    const Tensor packed = stats_device_.as_tensor(DType::f32, {3}, kPackedOffset);
    ops::pack_grad_stats(local, packed);
    group.all_reduce(packed, ReduceOp::sum);
    const Tensor host = stats_host_.as_tensor(DType::f32, {3}, kPackedOffset);
    ops::copy(packed, host);  // device -> host: the step's host synchronisation
    ops::unpack_grad_stats(host, norm_sq, found_inf);
  } else {
    const Tensor host = stats_host_.as_tensor(DType::f64, {2});
    ops::copy(local, host);  // device -> host: the step's host synchronisation
    norm_sq = host.data_as<double>()[0];
    found_inf = host.data_as<double>()[1] > 0;
  }
}

void DistributedOptimizer::gradients_final(int begin, int end) {
  const auto& buckets = grad_buffer_->buckets();
  if (bucket_pending_.empty())
    for (const auto& b : buckets) bucket_pending_.push_back(static_cast<int>(b.params.size()));
  for (int p = begin; p < end; ++p) {
    const int b = grad_buffer_->param_bucket(p);
    if (--bucket_pending_.at(b) == 0 && !reducer_->reduced(b)) reducer_->reduce_bucket(b, store_);
  }
}

OptimizerStepResult DistributedOptimizer::step(double lr, double weight_decay, double beta1, double beta2, double eps,
                                               double clip_grad) {
  OptimizerStepResult result;
  result.loss_scale = loss_scale();
  reducer_->reduce_all(store_);  // the buckets gradients_final did not reduce yet; waits for all
  bucket_pending_.clear();
  // Main grads carry the loss scale with fp16: the stats op unscales the owned elements first.
  const double unscale = scaler_ ? scaler_->inverse_scale() : 1.0;
  double norm_sq = 0;
  bool found_inf = false;
  global_grad_stats(unscale, norm_sq, found_inf);
  result.grad_norm = std::sqrt(norm_sq);
  if (scaler_) scaler_->update(found_inf);
  if (found_inf || !std::isfinite(result.grad_norm)) {
    result.skipped = true;
    return result;
  }
  const double coefficient = clip_coefficient(result.grad_norm, clip_grad);

  ++step_count_;
  ops::AdamWParams hyper;
  hyper.lr = lr;
  hyper.beta1 = beta1;
  hyper.beta2 = beta2;
  hyper.eps = eps;
  hyper.weight_decay = weight_decay;  // on the segments flagged kSegmentWeightDecay
  hyper.step = step_count_;
  // Clip, AdamW on the fp32 main params and the write of the updated params in the model dtype
  // (into the model, or into the gather buffer when sharded): one op over every owned segment.
  const Tensor out = options_.shard_over_data_parallel ? gather_buffer_.as_tensor(store_.dtype(), {grad_buffer_->numel()})
                                                       : store_.all_values();
  ops::segmented_adamw(grad_buffer_->all(), main_params(), exp_avg(), exp_avg_sq(), out, adamw_table_, hyper,
                       coefficient);
  write_back_params();
  return result;
}

void DistributedOptimizer::write_back_params() {
  if (!options_.shard_over_data_parallel) return;  // segmented_adamw wrote the model params
  // Sharded: the owned slices are in the gather buffer (model dtype, GradBuffer layout); all-gather
  // every bucket over DP, then copy each parameter into the model. The copy is queued after the
  // collectives (NCCL orders the compute stream after them; MPI blocks): no host wait here.
  const DType dt = store_.dtype();
  const Tensor gathered = gather_buffer_.as_tensor(dt, {grad_buffer_->numel()});
  const auto& buckets = grad_buffer_->buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    Communicator& dp = reducer_->group_of(static_cast<int>(b));  // the expert-data group for experts
    if (dp.size() == 1) continue;
    const Tensor full = flat_range(gathered, buckets[b].start, buckets[b].numel);
    const int64_t shard = buckets[b].numel / dp.size();
    dp.all_gather(flat_range(full, dp.rank() * shard, shard), full);
  }
  ops::segmented_convert(gathered, store_.all_values(), gather_to_model_table_);
}

}  // namespace tessera::optim

namespace tessera::optim {

DType model_param_dtype(const std::string& precision) {
  if (precision == "fp32") return DType::f32;
  if (precision == "bf16") return DType::bf16;
  if (precision == "fp16") return DType::f16;
  TESSERA_CONFIG_FAIL("training.precision = \"", precision, "\" is not one of fp32 | bf16 | fp16");
}

}  // namespace tessera::optim
