// The training loop of tessera-train: on the run's TrainingSetup (training_setup.h: data, model,
// optimizer, built once), runs train_iters steps (micro-batch gradient accumulation, global-norm clipping, AdamW with the LR
// schedule), logs Megatron-style lines and metrics rows, and evaluates on the validation split.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tessera/models/stage_model.h"
#include "tessera/pipeline/pipeline_executor.h"
#include "tessera/train/config.h"
#include "tessera/train/metrics.h"
#include "tessera/train/training_setup.h"

namespace tessera::train {

struct TrainingSummary {
  std::vector<double> lm_loss;     // one per iteration
  std::vector<double> grad_norm;   // one per iteration (before clipping)
  double last_eval_loss = 0;       // NaN when no evaluation ran
  // Timing: every iteration this process ran except its first (one-time costs), i.e. resume + 2 ..
  // the last one run (train_iters, or where a save-and-exit stopped); none when it ran only one.
  int64_t timed_iterations = 0;
  int64_t first_timed_iteration = 0, last_timed_iteration = 0;  // 0 when none was timed
  double tokens_per_second = 0;    // over the timed iterations
  double seconds_per_iteration = 0;  // mean over the same iterations
  double tflops_per_device = 0;      // model FLOPs (6N + 12 L h s per token) / time / device
  double mfu = 0;                    // tflops_per_device / peak (0 without a peak)
  size_t peak_activation_bytes = 0;  // the activation arena's high-water mark (+ the model's scratch arenas)
  size_t peak_device_bytes = 0;      // device memory held at once (0 on the CPU)
};

// Hooks a caller adds to the loop (after the built-in logging, evaluation and checkpointing).
struct TrainingHooks {
  std::function<void(const IterationMetrics&)> on_iteration;  // every iteration, after its step
  std::function<void(int64_t iteration, double eval_loss)> on_eval;
  // After each iteration's step and logging; true stops training there (saving when
  // checkpoint.save is set, as at the end; no final evaluation).
  std::function<bool(int64_t iteration)> should_stop;
};

class Trainer {
 public:
  // build_training_setup(config, device), then the loop's state.
  Trainer(const Config& config, Device device);
  TrainingSummary train(const TrainingHooks& hooks = {});
  models::StageModel& model() { return *model_; }
  const TrainingSetup& setup() const { return *setup_; }

 private:
  double train_step(int64_t iteration, double& grad_norm, bool& skipped);
  double evaluate();
  void load_samples(const data::SampleSource& source, int64_t first_index, const Tensor& tokens,
                    const Tensor& loss_mask) const;

  std::unique_ptr<TrainingSetup> setup_;
  // Short names for the setup's members the loop uses.
  Config& config_ = setup_->config;
  const Device device_ = setup_->device;
  std::unique_ptr<parallel::ParallelContext>& context_ = setup_->context;
  TrainingData& data_ = setup_->data;
  const parallel::TensorParallel& tp_ = setup_->tp;
  std::unique_ptr<models::StageModel>& model_ = setup_->model;
  std::unique_ptr<optim::AdamWOptimizer>& optimizer_ = setup_->adamw;
  std::unique_ptr<optim::DistributedOptimizer>& distributed_optimizer_ = setup_->distributed_optimizer;
  std::unique_ptr<optim::LrSchedule>& schedule_ = setup_->schedule;
  const int64_t num_micro_batches_ = setup_->num_micro_batches;
  const double flops_per_iteration_ = setup_->flops_per_iteration;
  std::unique_ptr<ckpt::TrainingCheckpoints>& checkpoints_ = setup_->checkpoints;
  const ckpt::TrainingProgress& resume_ = setup_->resume;

  // The loop's state.
  Arena arena_;
  parallel::PipelineState pipeline_;  // pipeline activation arenas and verified schedules, across steps
  double loss_scale_ = 1;  // the scale the last step's loss gradients carried (fp16)
  int64_t consumed_samples_ = 0;
  int64_t eval_consumed_samples_ = 0;
};

}  // namespace tessera::train
