// What a training run is built from, once, by build_training_setup: the parallel layout, the data,
// the model (the model.architecture's family), the optimizer, the LR schedule, the checkpoints and
// where training resumes. The Trainer's loop (trainer.h) runs on it.
#pragma once
#include <memory>

#include "tessera/models/stage_model.h"
#include "tessera/nn/recompute.h"
#include "tessera/optim/adamw_optimizer.h"
#include "tessera/optim/distributed_optimizer.h"
#include "tessera/optim/lr_schedule.h"
#include "tessera/runtime/parallel_context.h"
#include "tessera/tensor_parallel/tp_group.h"
#include "tessera/train/config.h"
#include "tessera/train/training_checkpoints.h"
#include "tessera/train/training_data.h"
#include "tessera/train/memory_report.h"

namespace tessera::train {

struct TrainingSetup {
  Config config;  // the run's config; training.seed follows a loaded checkpoint's (unless no_load_rng)
  Device device;
  std::unique_ptr<parallel::ParallelContext> context;
  TrainingData data;
  parallel::TensorParallel tp;                 // this rank's tensor group
  std::unique_ptr<models::StageModel> model;   // built by the model.architecture's family
  std::unique_ptr<optim::AdamWOptimizer> adamw;  // the single-rank fp32 path (when no distributed one)
  // DP / distributed optimizer / mixed precision / model-parallel grad norm (replaces adamw).
  std::unique_ptr<optim::DistributedOptimizer> distributed_optimizer;
  std::unique_ptr<optim::LrSchedule> schedule;
  int64_t num_micro_batches = 1;
  double flops_per_iteration = 0;  // 6N + 12 L h s per token (models::flops_per_token) x tokens per step
  // Checkpoint load/save/exit (training_checkpoints.h) and where training resumes.
  std::unique_ptr<ckpt::TrainingCheckpoints> checkpoints;
  ckpt::TrainingProgress resume;
  MemoryReport memory;  // this rank's memory estimate, printed at start (memory_report.h)

  ckpt::TrainerOptimizer checkpointed_optimizer() const;
};

// Builds the run on this rank (collective over the world: the grid, pipeline setup, checkpoint
// load), logs the arguments and the layout, and loads checkpoint.load when set. Heap-allocated:
// the checkpoints and optimizers refer to its members.
std::unique_ptr<TrainingSetup> build_training_setup(const Config& config, Device device);
// The run's activation recomputation (parallel.recompute_*), checked against the layers of every
// pipeline stage's chunks (ConfigError naming the keys).
nn::RecomputeConfig recompute_config(const Config& config, int pp);

}  // namespace tessera::train
