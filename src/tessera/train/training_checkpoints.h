// The trainer's checkpointing: loading per [checkpoint] (load, finetune, no_load_optim, no_load_rng)
// and, after each iteration, saving per save_interval and stopping per exit_interval,
// exit_duration_in_mins or an exit signal (OR-reduced over ranks), always saving before it stops.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "tessera/ckpt/async_checkpoint_save.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/ckpt/checkpoint_save.h"
#include "tessera/models/stage_model.h"
#include "tessera/optim/adamw_optimizer.h"
#include "tessera/optim/distributed_optimizer.h"
#include "tessera/runtime/parallel_context.h"
#include "tessera/train/config.h"

namespace tessera::ckpt {

// The model's parameters as self-describing shards: split metadata from nn::Parameter when it
// carries global_shape / split_axis / split_offset, otherwise every tensor is whole.
std::vector<TensorShard> model_shards(const nn::ParameterStore& params);
// The trainer's optimizer: the single-rank AdamWOptimizer or the DistributedOptimizer (one is set).
struct TrainerOptimizer {
  optim::AdamWOptimizer* adamw = nullptr;
  optim::DistributedOptimizer* distributed = nullptr;
  bool sharded = false;  // distributed with use_distributed_optimizer and DP > 1: slices differ per DP rank
};
// The optimizer's state as (parameter, flat offset, count) slices: one whole-shard slice per
// parameter for AdamWOptimizer, the owned segments for DistributedOptimizer. Views, no copies.
OptimizerState optimizer_state(const TrainerOptimizer& optimizer, const nn::ParameterStore& params);
ShardCoordinates coordinates_of(parallel::ParallelContext& context);

class TrainingCheckpoints {
 public:
  TrainingCheckpoints(const train::Config& config, parallel::ParallelContext& context);

  // Loads checkpoint.load if its tracker exists (collective). Returns the progress to resume from:
  // iteration 0 and the config's seed when nothing was loaded or with finetune. A missing,
  // truncated or corrupt file, or a checkpoint of another model shape, on any rank: every rank
  // throws an Error naming the file (none waits in a collective).
  TrainingProgress load(models::StageModel& model, const TrainerOptimizer& optimizer);

  // After the iteration progress.iteration: saves when save_interval divides it, and returns true
  // when training must stop (exit signal on any rank, exit_interval, exit_duration_in_mins), after
  // saving (when checkpoint.save is set). Collective.
  bool after_iteration(const TrainingProgress& progress, models::StageModel& model, const TrainerOptimizer& optimizer);

  // Before the optimizer step (the first kernel of an iteration that writes the parameters or the
  // optimizer state): on a GPU, orders it after the copies of an asynchronous save's snapshot,
  // which overlap the forward/backward before it. No host wait.
  void before_parameter_update() { async_.order_before_update(); }

  // End of training: saves unless this iteration was just saved (checkpoint.save set).
  void at_end(const TrainingProgress& progress, models::StageModel& model, const TrainerOptimizer& optimizer);

 private:
  // asynchronous: checkpoint.async_save and not the last save (at an exit or the end of training).
  void save(const TrainingProgress& progress, models::StageModel& model, const TrainerOptimizer& optimizer,
            bool asynchronous = false);
  SaveRequest make_request(const TrainingProgress& progress, models::StageModel& model, OptimizerState& state) const;
  void finish_async_save(bool wait);  // collective; commits an async save whose writers are done (all, if wait)
  TrainingProgress load_on_this_rank(models::StageModel& model, const TrainerOptimizer& optimizer);
  // ConfigError naming common.h5 when the saved model_info (hidden size, layers, heads, vocab)
  // differs from this run's model.
  void check_model_matches(const CheckpointReader& reader, models::StageModel& model) const;

  const train::Config& config_;
  parallel::ParallelContext& context_;
  std::chrono::steady_clock::time_point start_;
  int64_t last_saved_iteration_ = -1;
  int64_t exit_interval_ = 0, exit_duration_in_mins_ = 0, keep_last_n_ = 0;
  bool signal_handler_ = false;
  bool async_save_ = false;
  bool snapshot_reserved_ = false;
  AsyncCheckpointSave async_;
};

}  // namespace tessera::ckpt
