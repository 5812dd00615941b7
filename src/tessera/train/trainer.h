// The training loop of tessera-train: on the run's TrainingSetup (training_setup.h: data, model,
// optimizer, built once), runs train_iters steps (micro-batch gradient accumulation, global-norm clipping, AdamW with the LR
// schedule), logs Megatron-style lines and metrics rows, and evaluates on the validation split.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tessera/data/document_masks.h"
#include "tessera/models/stage_model.h"
#include "tessera/pipeline/pipeline_executor.h"
#include "tessera/train/config.h"
#include "tessera/train/logits_writer.h"
#include "tessera/train/metrics.h"
#include "tessera/train/moe_metrics.h"
#include "tessera/train/seq2seq_batches.h"
#include "tessera/train/training_setup.h"

namespace tessera::train {

struct TrainingSummary {
  std::vector<double> lm_loss;     // one per iteration
  std::vector<double> grad_norm;   // one per iteration (before clipping)
  double last_eval_loss = 0;       // NaN when no evaluation ran
  double test_loss = 0;            // the test split's, at the end (NaN when it did not run)
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

// A step's loss and the loss's named metrics, over the global batch (token_loss.h).
struct StepLoss {
  double loss = 0;
  std::vector<std::pair<std::string, double>> metrics;
  std::vector<MoeLayerLoad> moe_load;  // MoE models: each MoE layer's expert load (moe_metrics.h)
};

class Trainer {
 public:
  // build_training_setup(config, device), then the loop's state.
  Trainer(const Config& config, Device device);
  TrainingSummary train(const TrainingHooks& hooks = {});
  // Eval-only (tessera-train --eval-only): the loss of the split's first eval_iters global batches
  // (the window the first evaluation of a training run uses) with the weights as built or loaded
  // (checkpoint.load), printed as Megatron's validation line at the loaded iteration and written
  // to metrics_file. ConfigError when the split is empty or eval_iters is 0.
  // logits_file (optional): the evaluated samples' top-k logits (logits_writer.h).
  double evaluate_checkpoint(EvalSplit split, const std::string& logits_file = "", int64_t logits_top_k = 10);
  models::StageModel& model() { return *model_; }
  const TrainingSetup& setup() const { return *setup_; }

 private:
  StepLoss train_step(int64_t iteration, double& grad_norm, bool& skipped);
  // The loss of eval_iters global batches of split from sample consumed_samples on (advanced).
  // The loss over the split's eval_iters batches; its named metrics go to last_eval_metrics_.
  double evaluate(const data::SampleSource& split, int64_t& consumed_samples, LogitsWriter* logits = nullptr);
  std::vector<std::pair<std::string, double>> last_eval_metrics_;
  // Loads this DP rank's micro-batches of the step whose global batch starts at sample step_start;
  // returns the loss's denominator of the whole global batch (summed over DP).
  double load_step(const data::SampleSource& source, int64_t step_start);
  models::MicroBatch micro_batch(int64_t m);  // micro-batch m of the last load_step
  // The step's loss and metrics from this rank's loss terms (last pipeline stage) and the global denominator.
  StepLoss reduce_step_loss(models::LossSum local, double denominator) const;
  // Clip and step the optimizer (AdamW) on this step's gradients; the norm before clipping.
  void update_parameters(int64_t iteration, double& grad_norm, bool& skipped);

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
  std::vector<int32_t> step_tokens_;    // load_step: the step's micro-batches on this DP rank,
  std::vector<float> step_loss_mask_;   // [micro-batches, b, s+1] and [micro-batches, b, s]
  std::vector<int32_t> step_position_ids_;  // [micro-batches, b, s] (data.reset_position_ids)
  std::vector<int32_t> step_document_ids_;  // [micro-batches, b, s] (data.reset_attention_mask)
  data::DocumentMaskOptions document_masks_;  // data.eod_mask_loss, reset_position_ids, reset_attention_mask
  // A masked-LM (BERT) step, [micro-batches, b, s] each (sentence labels [micro-batches, b]);
  // step_loss_mask_ holds its loss mask. masked_lm_step_: the last load_step read a masked-LM source.
  bool masked_lm_step_ = false;
  std::vector<int32_t> step_labels_, step_token_types_, step_sentence_labels_;
  std::vector<uint8_t> step_padding_;
  // Fills the step's micro-batches from a masked-LM source; returns this rank's denominator.
  double load_masked_lm_step(const data::SampleSource& source, int64_t step_start);
  // An encoder-decoder (T5) step: seq2seq_step_ = the last load_step read a seq2seq source.
  bool seq2seq_step_ = false;
  Seq2SeqBatches seq2seq_;
};

}  // namespace tessera::train
