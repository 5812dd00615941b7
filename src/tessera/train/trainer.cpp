#include "tessera/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

#include "tessera/core/logging.h"
#include "tessera/distributed/data_parallel.h"
#include "tessera/distributed/tp_grads.h"
#include "tessera/models/model_registry.h"
#include "tessera/models/vocab.h"
#include "tessera/optim/grad_clip.h"
#include "tessera/pipeline/forward_backward.h"
#include "tessera/pipeline/pipeline_layout.h"
#include "tessera/pipeline/pipeline_training.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/loss_check.h"
#include "tessera/train/tp_report.h"
#include "tessera/train/training_optimizer.h"

namespace tessera::train {

namespace {
using Clock = std::chrono::steady_clock;

// The activation arena's first block: the estimate of what one micro-batch's forward keeps where the
// model says it is exact (ActivationMemory::exact); otherwise 0 (64 MiB blocks, merged into one after
// the first step).
size_t first_activation_block_bytes(const TrainingSetup& setup) {
  const models::ActivationMemory& estimate = setup.memory.activation;
  if (!estimate.exact) return 0;
  return static_cast<size_t>(std::max<int64_t>(0, estimate.inputs + estimate.kept_per_micro_batch));
}
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
}  // namespace

Trainer::Trainer(const Config& config, Device device)
    : setup_(build_training_setup(config, device)),
      // One micro-batch's inputs and what its forward keeps, in one block (no tails abandoned);
      // the backward's few extra buffers of the head and embedding go to 64 MiB blocks after it.
      arena_(size_t(64) << 20, device, first_activation_block_bytes(*setup_)) {
  document_masks_ = {data_.eod, config_.data.eod_mask_loss, config_.data.reset_position_ids,
                     config_.data.reset_attention_mask};
  consumed_samples_ = resume_.consumed_samples;
  eval_consumed_samples_ = resume_.eval_consumed_samples;
}

double Trainer::load_masked_lm_step(const data::SampleSource& source, int64_t step_start) {
  const int64_t b = config_.training.micro_batch_size, s = config_.model.seq_length;
  const int64_t dp = context_->dp_size(), dp_rank = context_->dp_rank();
  const size_t n = static_cast<size_t>(num_micro_batches_ * b * s), us = static_cast<size_t>(s);
  step_tokens_.resize(n);
  step_loss_mask_.resize(n);
  step_labels_.resize(n);
  step_token_types_.resize(n);
  step_padding_.resize(n);
  step_sentence_labels_.resize(static_cast<size_t>(num_micro_batches_ * b));
  double denominator = 0;
  for (int64_t m = 0; m < num_micro_batches_; ++m) {
    const int64_t first = step_start + (m * dp + dp_rank) * b;  // Megatron's sampler, as load_step
    for (int64_t j = 0; j < b; ++j) {
      const size_t at = static_cast<size_t>((m * b + j) * s);
      data::MaskedLmSample sample{std::span<int32_t>(step_tokens_.data() + at, us),
                                  std::span<int32_t>(step_labels_.data() + at, us),
                                  std::span<int32_t>(step_token_types_.data() + at, us),
                                  std::span<float>(step_loss_mask_.data() + at, us),
                                  std::span<uint8_t>(step_padding_.data() + at, us), 0};
      source.masked_lm_sample(first + j, sample);
      step_sentence_labels_[static_cast<size_t>(m * b + j)] = sample.is_random;
    }
    denominator += model_->loss().denominator(
        {b, s, std::span<const int32_t>(step_tokens_.data() + m * b * s, static_cast<size_t>(b * s)),
         std::span<const float>(step_loss_mask_.data() + m * b * s, static_cast<size_t>(b * s))});
  }
  return parallel::sum_over_data_parallel(context_->data(), denominator);
}

double Trainer::load_step(const data::SampleSource& source, int64_t step_start) {
  masked_lm_step_ = source.masked_lm();
  if (masked_lm_step_) return load_masked_lm_step(source, step_start);
  seq2seq_step_ = source.seq2seq();
  if (seq2seq_step_) {  // T5 (seq2seq_batches.h)
    seq2seq_.load(source, step_start, num_micro_batches_, config_.training.micro_batch_size, config_.model.seq_length,
                  config_.model.decoder_seq_length, context_->dp_size(), context_->dp_rank());
    double denominator = 0;
    for (int64_t m = 0; m < num_micro_batches_; ++m) denominator += model_->loss().denominator(seq2seq_.loss_inputs(m));
    return parallel::sum_over_data_parallel(context_->data(), denominator);
  }
  const int64_t b = config_.training.micro_batch_size, s = config_.model.seq_length;
  const int64_t dp = context_->dp_size(), dp_rank = context_->dp_rank();
  step_tokens_.resize(static_cast<size_t>(num_micro_batches_ * b * (s + 1)));
  step_loss_mask_.resize(static_cast<size_t>(num_micro_batches_ * b * s));
  step_position_ids_.resize(static_cast<size_t>(num_micro_batches_ * b * s));
  step_document_ids_.resize(static_cast<size_t>(num_micro_batches_ * b * s));
  double denominator = 0;
  for (int64_t m = 0; m < num_micro_batches_; ++m) {
    int32_t* tokens = step_tokens_.data() + m * b * (s + 1);
    float* mask = step_loss_mask_.data() + m * b * s;
    // Megatron's sampler: the step's global batch is step_start + [0, gbs); DP rank r reads the
    // r-th micro_batch_size slice of each chunk of micro_batch_size * dp samples.
    const int64_t first = step_start + (m * dp + dp_rank) * b;
    for (int64_t j = 0; j < b; ++j) {
      source.sample(first + j, std::span<int32_t>(tokens + j * (s + 1), static_cast<size_t>(s + 1)),
                    std::span<float>(mask + j * s, static_cast<size_t>(s)));
      if (document_masks_.any())  // Megatron's eod_mask_loss / reset_position_ids / reset_attention_mask
        data::apply_document_masks(document_masks_, std::span<const int32_t>(tokens + j * (s + 1), static_cast<size_t>(s)),
                                   std::span<float>(mask + j * s, static_cast<size_t>(s)),
                                   std::span<int32_t>(step_position_ids_.data() + (m * b + j) * s, static_cast<size_t>(s)),
                                   std::span<int32_t>(step_document_ids_.data() + (m * b + j) * s, static_cast<size_t>(s)));
    }
    denominator += model_->loss().denominator(
        {b, s, std::span<const int32_t>(tokens, static_cast<size_t>(b * (s + 1))),
         std::span<const float>(mask, static_cast<size_t>(b * s))});
  }
  return parallel::sum_over_data_parallel(context_->data(), denominator);
}

models::MicroBatch Trainer::micro_batch(int64_t m) {
  const int64_t b = config_.training.micro_batch_size, s = config_.model.seq_length;
  if (seq2seq_step_) return seq2seq_.micro_batch(m);
  if (masked_lm_step_) {
    models::MicroBatch batch;
    batch.tokens = Tensor(step_tokens_.data() + m * b * s, DType::i32, {b, s});
    batch.loss_mask = Tensor(step_loss_mask_.data() + m * b * s, DType::f32, {b, s});
    batch.labels = Tensor(step_labels_.data() + m * b * s, DType::i32, {b, s});
    batch.token_types = Tensor(step_token_types_.data() + m * b * s, DType::i32, {b, s});
    batch.padding_mask = Tensor(step_padding_.data() + m * b * s, DType::u8, {b, s});
    batch.sentence_labels = Tensor(step_sentence_labels_.data() + m * b, DType::i32, {b});
    return batch;
  }
  models::MicroBatch batch{Tensor(step_tokens_.data() + m * b * (s + 1), DType::i32, {b, s + 1}),
                           Tensor(step_loss_mask_.data() + m * b * s, DType::f32, {b, s}), Tensor(), Tensor()};
  if (document_masks_.reset_position_ids)
    batch.position_ids = Tensor(step_position_ids_.data() + m * b * s, DType::i32, {b, s});
  if (document_masks_.reset_attention_mask)
    batch.document_ids = Tensor(step_document_ids_.data() + m * b * s, DType::i32, {b, s});
  return batch;
}

StepLoss Trainer::reduce_step_loss(models::LossSum local, double denominator) const {
  // The loss terms live on the last pipeline stage; every rank gets them, summed over DP.
  // Reading the loss sum waits for its last device term (the step's kernels queued before it).
  const double loss_sum = parallel::value_from_last_stage(*context_, local.loss_sum.value());
  StepLoss loss;
  const double inverse = denominator > 0 ? 1.0 / denominator : std::numeric_limits<double>::quiet_NaN();
  loss.loss = parallel::sum_over_data_parallel(context_->data(), loss_sum) * inverse;
  // Every rank lists the loss's metrics in the same order (the last stage's names).
  for (const auto& [name, value] : local.metric_sums) {
    double v = parallel::value_from_last_stage(*context_, value);
    loss.metrics.emplace_back(name, parallel::sum_over_data_parallel(context_->data(), v) * inverse);
  }
  return loss;
}

StepLoss Trainer::train_step(int64_t iteration, double& grad_norm, bool& skipped) {
  const auto& t = config_.training;
  int64_t b = t.micro_batch_size;
  auto& params = model_->parameters();
  params.zero_grads();
  parallel::ForwardBackwardArgs args;
  args.model = model_.get();
  args.context = context_.get();
  args.num_micro_batches = num_micro_batches_;
  args.micro_batch_size = b;
  args.seq_length = config_.model.seq_length;
  args.pipeline_state = &pipeline_;
  int64_t step_start = consumed_samples_, dp = context_->dp_size(), dp_rank = context_->dp_rank();
  // The step's loss denominator (summed over DP) is known before the first backward.
  const double denominator = load_step(*data_.train, step_start);
  args.load_micro_batch = [&](int64_t m) { return micro_batch(m); };
  args.dropout = [&](int64_t m) {
    uint64_t first_sample = static_cast<uint64_t>(step_start + (m * dp + dp_rank) * b);
    return nn::DropoutContext{static_cast<uint64_t>(t.seed), mix_stream(static_cast<uint64_t>(iteration), first_sample),
                              true};
  };
  // On a GPU the DP reduction of each gradient bucket overlaps the rest of the last backward.
  if (distributed_optimizer_ && device_.is_cuda() && context_->dp_size() > 1)
    args.grads_final = [&](int begin, int end) { distributed_optimizer_->gradients_final(begin, end); };
  // Gradients of loss_sum / denominator; the DP reduction averages (hence x dp); fp16 losses carry
  // the loss scale.
  loss_scale_ = distributed_optimizer_ ? distributed_optimizer_->loss_scale() : 1.0;
  args.grad_scale = denominator > 0 ? loss_scale_ * static_cast<double>(dp) / denominator : 0.0;
  arena_.consolidate();  // one block again if the last step spilled past the estimate (Arena::consolidate)
  parallel::ForwardBackwardResult losses = parallel::forward_backward(args, arena_);
  // Sequence parallelism: LayerNorm / row-parallel bias / position grads are partial over TP.
  parallel::all_reduce_sequence_parallel_grads(model_->parameters(), tp_);
  // Pipeline: tied-embedding grads summed over first and last stage; the loss comes from the last.
  parallel::all_reduce_tied_embedding_grads(model_->parameters(), *context_);
  if (context_->pp_size() > 1 && consumed_samples_ == resume_.consumed_samples)
    parallel::log_pipeline_activation_memory(*context_, losses, num_micro_batches_);
  // An asynchronous save's snapshot copies (issued after the last step) overlap the forward/backward
  // above; the parameter update below waits for them on the GPU.
  if (checkpoints_) checkpoints_->before_parameter_update();
  update_parameters(iteration, grad_norm, skipped);
  consumed_samples_ += t.global_batch_size;
  // After the update is queued: the step's only host wait for the loss is here, not mid-backward.
  StepLoss loss = reduce_step_loss(losses.loss, denominator);
  if (config_.model.num_experts > 0) {
    MoeStepMetrics moe = reduce_moe_stats(model_->take_moe_stats(), config_.model, *context_, denominator);
    loss.metrics.insert(loss.metrics.end(), moe.losses.begin(), moe.losses.end());
    loss.moe_load = std::move(moe.load);
  }
  return loss;
}

void Trainer::update_parameters(int64_t iteration, double& grad_norm, bool& skipped) {
  const auto& o = config_.optimizer;
  if (distributed_optimizer_) {
    optim::OptimizerStepResult r = distributed_optimizer_->step(schedule_->lr(iteration - 1), o.weight_decay,
                                                                o.adam_beta1, o.adam_beta2, o.adam_eps, o.clip_grad);
    grad_norm = r.grad_norm;
    skipped = r.skipped;
    return;
  }
  std::vector<Tensor> grads;
  for (const auto& p : model_->parameters().parameters()) grads.push_back(p.grad);
  grad_norm = optim::finish_grad_norm(optim::local_sum_of_squares(grads));
  skipped = !std::isfinite(grad_norm);
  if (skipped) return;
  optim::scale_grads(grads, optim::clip_coefficient(grad_norm, o.clip_grad));
  optimizer_->step(schedule_->lr(iteration - 1), o.weight_decay, o.adam_beta1, o.adam_beta2, o.adam_eps);
}

double Trainer::evaluate(const data::SampleSource& split, int64_t& consumed_samples, LogitsWriter* logits) {
  const auto& t = config_.training;
  int64_t b = t.micro_batch_size;
  parallel::ForwardBackwardArgs args;
  args.model = model_.get();
  args.context = context_.get();
  args.num_micro_batches = num_micro_batches_;
  args.micro_batch_size = b;
  args.seq_length = config_.model.seq_length;
  args.pipeline_state = &pipeline_;
  args.forward_only = true;
  args.dropout = [](int64_t) { return nn::DropoutContext{}; };
  args.load_micro_batch = [&](int64_t m) { return micro_batch(m); };
  // The loss over every evaluated token (the loss's terms summed over the eval_iters batches, over
  // their denominator), as the training loss.
  models::LossSum total;
  double denominator = 0;
  for (int64_t it = 0; it < t.eval_iters; ++it) {
    denominator += load_step(split, consumed_samples);
    if (logits) {
      const int64_t s = config_.model.seq_length, first_sample = consumed_samples;
      args.on_logits = [&, s, first_sample](int64_t m, const Tensor& micro_batch_logits) {
        const size_t tokens = static_cast<size_t>(b * (s + 1)), mask = static_cast<size_t>(b * s);
        models::LossInputs inputs{b, s, std::span<const int32_t>(step_tokens_.data() + m * tokens, tokens),
                                  std::span<const float>(step_loss_mask_.data() + m * mask, mask)};
        logits->add(first_sample, m, micro_batch_logits, inputs);
      };
    }
    parallel::ForwardBackwardResult r = parallel::forward_backward(args, arena_);
    consumed_samples += t.global_batch_size;
    models::accumulate(total, r.loss);
  }
  StepLoss loss = reduce_step_loss(total, denominator);
  last_eval_metrics_ = loss.metrics;
  return loss.loss;
}

double Trainer::evaluate_checkpoint(EvalSplit split, const std::string& logits_file, int64_t logits_top_k) {
  const auto& t = config_.training;
  const data::SampleSource* source = split == EvalSplit::valid ? data_.valid.get() : data_.test.get();
  if (!source)
    TESSERA_CONFIG_FAIL("data.split = \"", config_.data.split, "\" gives the ",
                        split == EvalSplit::valid ? "validation" : "test", " split no data; nothing to evaluate");
  if (t.eval_iters <= 0) TESSERA_CONFIG_FAIL("training.eval_iters = ", t.eval_iters, " evaluates nothing; set it > 0");
  std::unique_ptr<LogitsWriter> logits;
  if (!logits_file.empty() && (source->masked_lm() || source->seq2seq()))
    TESSERA_CONFIG_FAIL("--logits-file writes next-token logits of a GPT model; model.architecture = ",
                        config_.model.architecture, " has none");
  if (!logits_file.empty())
    logits = std::make_unique<LogitsWriter>(logits_file, logits_top_k, model_->vocab_size(), tp_, *context_);
  int64_t first_sample = 0;
  const double loss = evaluate(*source, first_sample, logits.get());
  const int64_t iteration = resume_.iteration;
  log::info(format_eval_line(iteration, loss, split));
  MetricsWriter(config_.logging.metrics_file, config_.logging.tensorboard_dir).write_eval(iteration, loss, split, last_eval_metrics_);
  return loss;
}

TrainingSummary Trainer::train(const TrainingHooks& hooks) {
  const auto& t = config_.training;
  TrainingSummary summary;
  summary.last_eval_loss = std::numeric_limits<double>::quiet_NaN();
  summary.test_loss = std::numeric_limits<double>::quiet_NaN();
  MetricsWriter metrics(config_.logging.metrics_file, config_.logging.tensorboard_dir);
  ProgressBar progress(t.train_iters);
  double peak = config_.training.peak_tflops_per_device;
  if (peak == 0 && device_.is_cuda()) peak = 989.0;
  int64_t skipped_total = resume_.skipped_iterations, nan_total = resume_.nan_iterations;
  double timed_seconds = 0;
  int64_t timed_iterations = 0;
  const int64_t first_iteration = resume_.iteration + 1;
  auto run_eval = [&](int64_t iteration) {
    if (!data_.valid || t.eval_iters == 0) return;
    double eval_loss = evaluate(*data_.valid, eval_consumed_samples_);
    summary.last_eval_loss = eval_loss;
    progress.clear();
    log::info(std::string(80, '-'));
    log::info(format_eval_line(iteration, eval_loss));
    log::info(std::string(80, '-'));
    metrics.write_eval(iteration, eval_loss, EvalSplit::valid, last_eval_metrics_);
    if (hooks.on_eval) hooks.on_eval(iteration, eval_loss);
  };

  const ckpt::TrainerOptimizer optimizer = setup_->checkpointed_optimizer();
  auto progress_at = [&](int64_t iteration) {
    return ckpt::TrainingProgress{iteration, consumed_samples_, eval_consumed_samples_, skipped_total, nan_total,
                                  config_.training.seed};
  };
  int64_t last_iteration = resume_.iteration;
  bool stopped = false;
  for (int64_t iteration = first_iteration; iteration <= t.train_iters; ++iteration) {
    auto start = Clock::now();
    double grad_norm = 0;
    bool skipped = false;
    const StepLoss step = train_step(iteration, grad_norm, skipped);
    const double loss = step.loss;
    double seconds = seconds_since(start);
    check_loss_is_finite(loss, iteration, context_->world().rank());
    if (skipped) ++skipped_total;
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) ++nan_total;
    if (iteration > first_iteration) {  // the first iteration of this process pays one-time costs
      timed_seconds += seconds;
      if (timed_iterations++ == 0) summary.first_timed_iteration = iteration;
      summary.last_timed_iteration = iteration;
    }
    summary.lm_loss.push_back(loss);
    summary.grad_norm.push_back(grad_norm);

    IterationMetrics m;
    m.iteration = iteration;
    m.train_iters = t.train_iters;
    m.consumed_samples = consumed_samples_;
    m.global_batch_size = t.global_batch_size;
    m.elapsed_ms = seconds * 1e3;
    m.learning_rate = schedule_->lr(iteration - 1);
    m.lm_loss = loss;
    m.loss_metrics = step.metrics;
    for (const MoeLayerLoad& load : step.moe_load) {
      m.moe_expert_load.emplace_back(load.layer, load.expert_share);
      m.moe_dropped_slots.emplace_back(load.layer, load.dropped);
    }
    m.grad_norm = grad_norm;
    m.loss_scale = loss_scale_;
    m.tokens_per_second = static_cast<double>(t.global_batch_size * config_.model.seq_length) / seconds;
    m.tflops_per_device = flops_per_iteration_ / context_->grid().world_size() / seconds / 1e12;
    if (peak > 0) m.mfu = m.tflops_per_device / peak;
    m.skipped_iterations = skipped_total;
    m.nan_iterations = nan_total;
    m.peak_memory_bytes = static_cast<int64_t>(device_.is_cuda() ? device_peak_allocated_bytes() : arena_.peak_bytes());
    if (iteration % config_.logging.log_interval == 0 || iteration == t.train_iters) {
      progress.clear();
      log::info(format_log_line(m));
      metrics.write_iteration(m);
    }
    if (hooks.on_iteration) hooks.on_iteration(m);
    progress.update(iteration, seconds);
    if (t.eval_interval > 0 && iteration % t.eval_interval == 0) run_eval(iteration);
    last_iteration = iteration;
    if (hooks.should_stop && hooks.should_stop(iteration)) {  // ends like the last iteration (save)
      checkpoints_->at_end(progress_at(iteration), *model_, optimizer);
      stopped = true;
      break;
    }
    if (checkpoints_->after_iteration(progress_at(iteration), *model_, optimizer)) {
      stopped = true;
      break;
    }
  }
  if (!stopped && t.eval_interval > 0 && t.train_iters % t.eval_interval != 0) run_eval(t.train_iters);
  // The test split, once at the end (from its first sample), when the run evaluates at all.
  if (!stopped && data_.test && t.eval_interval > 0 && t.eval_iters > 0) {
    int64_t test_samples = 0;
    summary.test_loss = evaluate(*data_.test, test_samples);
    progress.clear();
    log::info(format_eval_line(last_iteration, summary.test_loss, EvalSplit::test));
    metrics.write_eval(last_iteration, summary.test_loss, EvalSplit::test, last_eval_metrics_);
  }
  if (!stopped) checkpoints_->at_end(progress_at(last_iteration), *model_, optimizer);
  progress.clear();
  summary.timed_iterations = timed_iterations;
  if (timed_iterations > 0) {
    summary.tokens_per_second = static_cast<double>(timed_iterations * t.global_batch_size * config_.model.seq_length) /
                                timed_seconds;
    summary.seconds_per_iteration = timed_seconds / static_cast<double>(timed_iterations);
    summary.tflops_per_device =
        flops_per_iteration_ / context_->grid().world_size() / summary.seconds_per_iteration / 1e12;
    if (peak > 0) summary.mfu = summary.tflops_per_device / peak;
  }
  summary.peak_activation_bytes = arena_.peak_bytes() + model_->scratch_peak_bytes();
  if (device_.is_cuda()) summary.peak_device_bytes = device_peak_allocated_bytes();
  std::ostringstream done;  // what ran and what was timed
  if (last_iteration >= first_iteration)
    done << "iterations " << first_iteration << ".." << last_iteration << " of " << t.train_iters;
  else
    done << "no iteration left to run (at " << last_iteration << " of " << t.train_iters << ")";
  if (timed_iterations > 0)
    done << ", " << summary.tokens_per_second << " tokens/s on average over " << timed_iterations
         << " timed iterations (" << summary.first_timed_iteration << ".." << summary.last_timed_iteration << ")";
  else
    done << ", no iteration timed (the first one a run makes is not)";
  log::info(stopped ? "training stopped early: " : "training finished: ", done.str(), ", peak activation memory ",
            summary.peak_activation_bytes / (1 << 20), " MiB",
            device_.is_cuda() ? ", peak device memory " + std::to_string(summary.peak_device_bytes >> 20) +
                                    " MiB (estimated at start: " + std::to_string(setup_->memory.total() >> 20) + " MiB)"
                              : std::string());
  return summary;
}

}  // namespace tessera::train
