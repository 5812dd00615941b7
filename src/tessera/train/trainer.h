// The training loop of tessera-train: builds data, model and optimizer from the Config, then runs
// train_iters steps (micro-batch gradient accumulation, global-norm clipping, AdamW with the LR
// schedule), logs Megatron-style lines and metrics rows, and evaluates on the validation split.
#pragma once
#include <memory>
#include <vector>

#include "tessera/train/training_checkpoints.h"
#include "tessera/models/gpt.h"
#include "tessera/optim/adamw_optimizer.h"
#include "tessera/optim/distributed_optimizer.h"
#include "tessera/optim/lr_schedule.h"
#include "tessera/pipeline/pipeline_executor.h"
#include "tessera/runtime/parallel_context.h"
#include "tessera/train/config.h"
#include "tessera/train/metrics.h"
#include "tessera/train/training_data.h"

namespace tessera::train {

struct TrainingSummary {
  std::vector<double> lm_loss;     // one per iteration
  std::vector<double> grad_norm;   // one per iteration (before clipping)
  double last_eval_loss = 0;       // NaN when no evaluation ran
  double tokens_per_second = 0;    // over the whole run, after the first iteration
  double seconds_per_iteration = 0;  // mean over the same iterations
  double tflops_per_device = 0;      // model FLOPs (6N + 12 L h s per token) / time / device
  double mfu = 0;                    // tflops_per_device / peak (0 without a peak)
  size_t peak_activation_bytes = 0;  // the activation arena's high-water mark
  size_t peak_device_bytes = 0;      // device memory held at once (0 on the CPU)
};

class Trainer {
 public:
  Trainer(const Config& config, Device device);
  TrainingSummary train();
  models::StageModel& model() { return *model_; }

 private:
  double train_step(int64_t iteration, double& grad_norm, bool& skipped);
  double evaluate();
  void load_samples(const data::SampleSource& source, int64_t first_index, const Tensor& tokens,
                    const Tensor& loss_mask) const;
  void log_start() const;

  Config config_;
  Device device_;
  std::unique_ptr<parallel::ParallelContext> context_;
  TrainingData data_;
  parallel::TensorParallel tp_;  // this rank's tensor group
  std::unique_ptr<models::StageModel> model_;  // built by the model.architecture's family
  std::unique_ptr<optim::AdamWOptimizer> optimizer_;
  // DP / distributed optimizer / mixed precision / model-parallel grad norm (replaces optimizer_).
  std::unique_ptr<optim::DistributedOptimizer> distributed_optimizer_;
  double loss_scale_ = 1;  // the scale the last step's loss gradients carried (fp16)
  std::unique_ptr<optim::LrSchedule> schedule_;
  Arena arena_;
  parallel::PipelineState pipeline_;  // pipeline activation arenas and verified schedules, across steps
  int64_t num_micro_batches_ = 1;
  int64_t consumed_samples_ = 0;
  int64_t eval_consumed_samples_ = 0;
  double flops_per_iteration_ = 0;
  // Checkpoint load/save/exit (ckpt/training_checkpoints.h) and where training resumes.
  std::unique_ptr<ckpt::TrainingCheckpoints> checkpoints_;
  ckpt::TrainingProgress resume_;
};

}  // namespace tessera::train
