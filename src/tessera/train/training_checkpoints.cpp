// TrainingCheckpoints: glue between the trainer's objects (ParameterStore, AdamWOptimizer, LR
// schedule settings, progress counters) and save_checkpoint / CheckpointReader.
#include "tessera/train/training_checkpoints.h"


#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/ckpt/collective_errors.h"
#include "tessera/ckpt/exit_signal.h"
#include "tessera/ckpt/load_target.h"
#include "tessera/core/buffer.h"
#include "tessera/core/logging.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;

namespace {

template <typename P>
constexpr bool has_split_metadata = requires(const P& p) {
  p.global_shape;
  p.split_axis;
  p.split_offset;
};

template <typename P>
TensorShard shard_of(const P& p) {
  TensorShard shard{p.name, p.value, p.value.shape(), -1, 0};
  if constexpr (has_split_metadata<P>) {
    if (!p.global_shape.empty() && static_cast<int>(p.split_axis) >= 0) {
      shard.global_shape = Shape(p.global_shape.begin(), p.global_shape.end());
      shard.split_axis = static_cast<int>(p.split_axis);
      shard.split_offset = static_cast<int64_t>(p.split_offset);
    }
  }
  if constexpr (requires { p.roles; }) shard.vocab_axis = p.roles.vocab_axis;
  return shard;
}

int64_t int_value(const train::Config& config, const char* key) { return std::get<int64_t>(config.values.at(key)); }
bool bool_value(const train::Config& config, const char* key) { return std::get<bool>(config.values.at(key)); }

}  // namespace

std::vector<TensorShard> model_shards(const nn::ParameterStore& params) {
  std::vector<TensorShard> shards;
  for (const auto& p : params.parameters()) shards.push_back(shard_of(p));
  return shards;
}

Tensor f32_range(const Tensor& flat, int64_t offset, int64_t count) {
  return Tensor(static_cast<float*>(flat.data()) + offset, DType::f32, {count}, flat.device());
}

OptimizerState optimizer_state(const TrainerOptimizer& optimizer, const nn::ParameterStore& params) {
  OptimizerState state;
  if (optimizer.adamw) {
    const optim::AdamWOptimizer& adamw = *optimizer.adamw;
    state.step = adamw.step_count();
    for (const auto& entry : adamw.params()) {
      OptimizerSlice slice;
      slice.param = shard_of(params.find(entry.name));
      slice.flat_offset = 0;
      slice.count = entry.param.numel();
      slice.exp_avg = adamw.exp_avg(entry.name).flat();
      slice.exp_avg_sq = adamw.exp_avg_sq(entry.name).flat();
      state.slices.push_back(std::move(slice));
    }
    return state;
  }
  TESSERA_CHECK(optimizer.distributed, "optimizer_state: no optimizer given");
  const optim::DistributedOptimizer& d = *optimizer.distributed;
  state.step = d.step_count();
  state.distributed = optimizer.sharded;
  if (const optim::DynamicGradScaler* scaler = d.scaler()) {
    state.loss_scale = scaler->scale();
    state.growth_tracker = scaler->growth_tracker();
    state.hysteresis = scaler->hysteresis_tracker();
  }
  Tensor main = d.main_params(), m = d.exp_avg(), v = d.exp_avg_sq();
  std::vector<int> seen(params.parameters().size(), 0);
  for (const optim::OwnedSegment& s : d.segments()) {
    if (s.numel == 0) continue;
    TESSERA_CHECK(seen.at(static_cast<size_t>(s.param))++ == 0, "the optimizer owns two segments of parameter ",
                  params.parameters()[static_cast<size_t>(s.param)].name, "; checkpoints expect one per rank");
    OptimizerSlice slice;
    slice.param = shard_of(params.parameters()[static_cast<size_t>(s.param)]);
    slice.flat_offset = s.param_offset;
    slice.count = s.numel;
    slice.exp_avg = f32_range(m, s.local_offset, s.numel);
    slice.exp_avg_sq = f32_range(v, s.local_offset, s.numel);
    slice.main_param = f32_range(main, s.local_offset, s.numel);
    state.slices.push_back(std::move(slice));
  }
  return state;
}

ShardCoordinates coordinates_of(parallel::ParallelContext& context) {
  ShardCoordinates c;
  c.tp_rank = context.tp_rank();
  c.tp_size = context.tp_size();
  c.pp_rank = context.pp_rank();
  c.pp_size = context.pp_size();
  c.dp_rank = context.dp_rank();
  c.dp_size = context.dp_size();
  // Expert parallelism: the EP ranks of a (TP, PP) shard hold different experts, one file each.
  c.ep_rank = context.grid().expert_model_rank();
  c.ep_size = context.grid().expert_model_size();
  c.world_rank = context.world().rank();
  c.world_size = context.world().size();
  return c;
}

TrainingCheckpoints::TrainingCheckpoints(const train::Config& config, parallel::ParallelContext& context)
    : config_(config), context_(context), start_(std::chrono::steady_clock::now()) {
  exit_interval_ = int_value(config, "training.exit_interval");
  exit_duration_in_mins_ = int_value(config, "training.exit_duration_in_mins");
  keep_last_n_ = int_value(config, "checkpoint.keep_last_n");
  signal_handler_ = bool_value(config, "training.exit_signal_handler");
  async_save_ = config.values.count("checkpoint.async_save") && bool_value(config, "checkpoint.async_save");
  if (signal_handler_) install_exit_signal_handler();  // for threads that do not block them
  else unblock_exit_signals_in_this_thread();          // the default action again, if tessera-train blocked them
  if (!has_split_metadata<nn::Parameter> && context.tp_size() > 1)
    TESSERA_FAIL("checkpoints at tensor_model_parallel_size > 1 need nn::Parameter's split metadata "
                 "(global_shape, split_axis, split_offset), which this build lacks");
}

TrainingProgress TrainingCheckpoints::load(models::StageModel& model, const TrainerOptimizer& optimizer) {
  TrainingProgress progress;
  progress.seed = config_.training.seed;
  if (config_.checkpoint.load.empty()) return progress;
  // A rank whose files are bad must not leave the others in a collective: all ranks fail together.
  run_on_all_ranks_or_fail_together(context_.world(), [&] { progress = load_on_this_rank(model, optimizer); });
  last_saved_iteration_ = progress.iteration;  // a save right now would rewrite what was just loaded
  return progress;
}

TrainingProgress TrainingCheckpoints::load_on_this_rank(models::StageModel& model, const TrainerOptimizer& optimizer) {
  const auto& c = config_.checkpoint;
  TrainingProgress fresh;
  fresh.seed = config_.training.seed;
  LoadTarget target = resolve_load_target(c.load);
  auto tracker = target.which;
  if (!tracker) {
    log::warn("WARNING: could not find the checkpoint tracker ", (fs::path(c.load) / kTrackerFile).string(),
              "; starting from random initialisation");
    return fresh;
  }
  fs::path folder = checkpoint_folder(target.dir, *tracker);
  auto start = std::chrono::steady_clock::now();
  CheckpointReader reader(folder);
  check_iteration_agrees(folder, *tracker, reader.iteration(), reader.progress().iteration);
  check_model_matches(reader, model);
  const bool weights_only = c.finetune || tracker->release;

  auto& params = model.parameters();
  auto source_for = [&](const std::string& name, const std::string& kind) -> std::string {
    // A copy (the last stage's tied output layer) comes from the parameter it copies when the
    // checkpoint was written without it (no pipeline stages; Megatron initialises it the same way).
    if (reader.has(kind, name)) return name;
    const std::string& copy_of = params.find(name).roles.copy_of;
    return copy_of.empty() ? name : copy_of;
  };
  for (const TensorShard& shard : model_shards(params)) reader.read_model(shard, source_for(shard.name, "param"));

  TrainingProgress progress = fresh;
  if (!weights_only) {
    TrainingProgress saved = reader.progress();
    progress.iteration = saved.iteration;
    progress.consumed_samples = saved.consumed_samples;
    progress.eval_consumed_samples = saved.eval_consumed_samples;
    progress.skipped_iterations = saved.skipped_iterations;
    progress.nan_iterations = saved.nan_iterations;
    if (!c.no_load_rng) {
      if (saved.seed != config_.training.seed)
        log::warn("WARNING: the checkpoint's seed ", saved.seed, " differs from training.seed ",
                  config_.training.seed, "; dropout streams follow the checkpoint (no_load_rng = false), data order "
                  "follows training.seed");
      progress.seed = saved.seed;
    }
    if (!c.no_load_optim) {
      TESSERA_CHECK(reader.has_optimizer(), "checkpoint ", folder.string(),
                    " holds no optimizer state; set checkpoint.no_load_optim = true or checkpoint.finetune = true");
      OptimizerState state = optimizer_state(optimizer, params);
      for (const OptimizerSlice& slice : state.slices) {
        reader.read_optimizer("exp_avg", slice, slice.exp_avg, source_for(slice.param.name, "exp_avg"));
        reader.read_optimizer("exp_avg_sq", slice, slice.exp_avg_sq, source_for(slice.param.name, "exp_avg_sq"));
        if (slice.main_param.defined() && slice.main_param.numel() > 0)
          reader.read_optimizer("main_param", slice, slice.main_param, source_for(slice.param.name, "main_param"));
      }
      OptimizerState scalars = reader.optimizer_scalars();
      if (optimizer.adamw) optimizer.adamw->set_step_count(scalars.step);
      if (optimizer.distributed) {
        optimizer.distributed->set_step_count(scalars.step);
        if (optim::DynamicGradScaler* scaler = optimizer.distributed->scaler())
          scaler->load_state(scalars.loss_scale, scalars.growth_tracker, scalars.hysteresis);
      }
    }
    auto saved_scheduler = reader.scheduler();
    const auto& o = config_.optimizer;
    if ((saved_scheduler.count("lr") && saved_scheduler["lr"] != o.lr) ||
        (saved_scheduler.count("min_lr") && saved_scheduler["min_lr"] != o.min_lr) ||
        reader.scheduler_names()["lr_decay_style"] != o.lr_decay_style)
      log::warn("WARNING: the checkpoint's learning-rate schedule differs from [optimizer]; using [optimizer]");
  }
  const ShardCoordinates& saved = reader.saved_layout();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info("loaded checkpoint from ", folder.string(), " at iteration ", reader.iteration(), " (saved at TP=",
            saved.tp_size, " PP=", saved.pp_size, " DP=", saved.dp_size, ")", weights_only ? ", weights only" : "",
            c.no_load_optim && !weights_only ? ", without optimizer state" : "", " in ", seconds, " s");
  if (!weights_only) log::info("resuming from iteration ", progress.iteration, ", consumed samples ",
                               progress.consumed_samples);
  return progress;
}

void TrainingCheckpoints::check_model_matches(const CheckpointReader& reader, models::StageModel& model) const {
  const fs::path common = reader.folder() / kCommonFile;
  const std::map<std::string, int64_t> saved = reader.model_info();
  const auto& m = config_.model;
  const std::pair<const char*, int64_t> expected[] = {{"hidden_size", m.hidden_size},
                                                      {"num_layers", m.num_layers},
                                                      {"num_attention_heads", m.num_attention_heads},
                                                      {"vocab_size", model.vocab_size()}};
  for (const auto& [key, value] : expected) {
    auto it = saved.find(key);
    if (it != saved.end() && it->second != value)
      TESSERA_CONFIG_FAIL("checkpoint ", common.string(), " was saved with ", key, " = ", it->second,
                          ", but this run has ", key, " = ", value,
                          "; load it with the model configuration it was saved with");
  }
}

void TrainingCheckpoints::finish_async_save(bool wait) {
  if (!async_.pending()) return;
  int64_t iteration = async_.iteration();
  std::optional<SaveResult> result = wait ? async_.finish(context_.world()) : async_.try_finish(context_.world());
  if (result)
    log::info("saved checkpoint at iteration ", iteration, " to ", result->folder.string(), " in ", result->seconds,
              " s (asynchronous)");
}

SaveRequest TrainingCheckpoints::make_request(const TrainingProgress& progress, models::StageModel& model,
                                              OptimizerState& state) const {
  const auto& o = config_.optimizer;
  SaveRequest request;
  request.save_dir = config_.checkpoint.save;
  request.iteration = progress.iteration;
  request.coords = coordinates_of(context_);
  request.model = model_shards(model.parameters());
  request.optimizer = &state;
  request.progress = progress;
  request.metadata.params_dtype = std::string(dtype_name(model.parameters().dtype()));
  request.metadata.config_toml = config_.to_toml();
  request.metadata.scheduler = {{"lr", o.lr},
                                {"min_lr", o.min_lr},
                                {"warmup_iters", static_cast<double>(o.lr_warmup_iters)},
                                {"decay_iters", static_cast<double>(o.lr_decay_iters)},
                                {"wsd_decay_iters", static_cast<double>(o.lr_wsd_decay_iters)}};
  request.metadata.scheduler_names = {{"lr_decay_style", o.lr_decay_style},
                                      {"lr_wsd_decay_style", o.lr_wsd_decay_style}};
  request.metadata.model = {{"vocab_size", model.vocab_size()},
                            {"padded_vocab_size", model.padded_vocab_size()},
                            {"num_layers", config_.model.num_layers},
                            {"hidden_size", config_.model.hidden_size},
                            {"num_attention_heads", config_.model.num_attention_heads},
                            {"seq_length", config_.model.seq_length}};
  request.keep_last_n = static_cast<int>(keep_last_n_);
  return request;
}

void TrainingCheckpoints::save(const TrainingProgress& progress, models::StageModel& model,
                               const TrainerOptimizer& optimizer, bool asynchronous) {
  finish_async_save(/*wait=*/true);  // one save in flight at a time, committed in order
  OptimizerState state = optimizer_state(optimizer, model.parameters());
  SaveRequest request = make_request(progress, model, state);
  if (asynchronous) {
    auto start = std::chrono::steady_clock::now();
    async_.start(request, context_.world());  // snapshots the tensors: training may change them now
    last_saved_iteration_ = progress.iteration;
    log::info("started asynchronous checkpoint save at iteration ", progress.iteration, " (snapshot in ",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s)");
    return;
  }
  SaveResult result = save_checkpoint(request, context_.world());
  last_saved_iteration_ = progress.iteration;
  log::info("saved checkpoint at iteration ", progress.iteration, " to ", result.folder.string(), " in ",
            result.seconds, " s");
}

bool TrainingCheckpoints::after_iteration(const TrainingProgress& progress, models::StageModel& model,
                                          const TrainerOptimizer& optimizer) {
  const auto& c = config_.checkpoint;
  const bool can_save = !c.save.empty();
  finish_async_save(/*wait=*/false);
  if (async_save_ && can_save && c.save_interval > 0 && !snapshot_reserved_ && !async_.pending()) {
    // Once, after the first step (the optimizer state exists by then): the snapshot's host buffers,
    // so that no save window pays for their allocation.
    OptimizerState state = optimizer_state(optimizer, model.parameters());
    async_.reserve(make_request(progress, model, state));
    snapshot_reserved_ = true;
  }
  if (can_save && c.save_interval > 0 && progress.iteration % c.save_interval == 0)
    save(progress, model, optimizer, async_save_ && progress.iteration != config_.training.train_iters);

  std::string reason;
  if (signal_handler_ || exit_duration_in_mins_ > 0) {
    Buffer flags_buffer(2 * sizeof(int32_t));
    auto* flags = static_cast<int32_t*>(flags_buffer.data());
    double minutes =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() / 60.0;
    flags[0] = signal_handler_ && exit_signal_received() ? 1 : 0;
    flags[1] = exit_duration_in_mins_ > 0 && minutes > static_cast<double>(exit_duration_in_mins_) ? 1 : 0;
    Tensor t = flags_buffer.as_tensor(DType::i32, {2});
    context_.world().all_reduce(t, ReduceOp::max);  // any rank's signal stops every rank
    if (flags[0]) reason = "an exit signal (SIGTERM/SIGUSR1)";
    else if (flags[1]) reason = "exit_duration_in_mins = " + std::to_string(exit_duration_in_mins_);
  }
  if (reason.empty() && exit_interval_ > 0 && progress.iteration % exit_interval_ == 0)
    reason = "exit_interval = " + std::to_string(exit_interval_);
  if (reason.empty()) return false;

  if (can_save && last_saved_iteration_ != progress.iteration) save(progress, model, optimizer);
  finish_async_save(/*wait=*/true);
  if (!can_save) log::warn("WARNING: checkpoint.save is empty; stopping without a checkpoint");
  log::info("exiting program at iteration ", progress.iteration, " after ", reason);
  clear_exit_signal();
  return true;
}

void TrainingCheckpoints::at_end(const TrainingProgress& progress, models::StageModel& model,
                                 const TrainerOptimizer& optimizer) {
  finish_async_save(/*wait=*/true);
  if (config_.checkpoint.save.empty() || progress.iteration == 0 || last_saved_iteration_ == progress.iteration)
    return;
  save(progress, model, optimizer);
}

}  // namespace tessera::ckpt
