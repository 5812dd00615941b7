// What a training run reports: the Megatron-style log line on the output rank, the metrics_file
// rows (JSON Lines, as INTERFACE.md), and the terminal progress bar.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::train {

struct IterationMetrics {
  int64_t iteration = 0, train_iters = 0, consumed_samples = 0, global_batch_size = 0;
  double elapsed_ms = 0, learning_rate = 0, lm_loss = 0, loss_scale = 1, grad_norm = 0;
  double tokens_per_second = 0, tflops_per_device = 0;
  std::optional<double> mfu;  // absent when the device's peak is unknown (CPU)
  int64_t skipped_iterations = 0, nan_iterations = 0;
  int64_t peak_memory_bytes = 0;  // peak device memory (CUDA) or activation arena (CPU) so far
  std::vector<std::pair<std::string, double>> loss_metrics;  // the loss's named metrics (token_loss.h)
  // MoE models: per MoE layer, the share of routed slots per expert and the slots dropped (metrics_file
  // "moe_expert_load" {"<layer>": [shares]} and "moe_dropped_slots" {"<layer>": n}).
  std::vector<std::pair<int64_t, std::vector<double>>> moe_expert_load;
  std::vector<std::pair<int64_t, double>> moe_dropped_slots;
};

namespace tensorboard {
class EventWriter;
}

std::string format_log_line(const IterationMetrics& m);
// Which split an evaluation ran on: the validation split (during training) or the test split (at
// the end of training, and on request in eval-only mode).
enum class EvalSplit { valid, test };
// Megatron's validation line ("validation loss at iteration N | lm loss value: ... | lm loss PPL:
// ... |"; "test loss at ..." for the test split).
std::string format_eval_line(int64_t iteration, double eval_loss, EvalSplit split = EvalSplit::valid);
double perplexity(double loss);                                      // exp(min(20, loss)); NaN stays NaN

// Writes one JSON object per line; flushed after every row so a killed job keeps its metrics.
// JSON has no NaN or Infinity: every non-finite number (lm_loss, grad_norm, eval_loss, ...) is
// written as null, so each row stays strict JSON; nan_iterations counts the iterations whose loss or
// grad norm was not finite (as the log line's "nan" field).
// With a tensorboard_dir, the same values also go to a TensorBoard event file there (Megatron's
// tags: "lm loss", "learning-rate", "grad-norm", "loss-scale", ..., "lm loss validation ppl").
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path, const std::string& tensorboard_dir = "");  // "" disables each
  ~MetricsWriter();
  void write_iteration(const IterationMetrics& m);
  // {"iteration", "eval_loss", "eval_perplexity"} (test split: "test_loss", "test_perplexity").
  // metrics: the loss's named metrics over the evaluated batches, written as <split>_<name>.
  void write_eval(int64_t iteration, double eval_loss, EvalSplit split = EvalSplit::valid,
                  const std::vector<std::pair<std::string, double>>& metrics = {});
  bool enabled() const { return out_.is_open(); }

 private:
  std::ofstream out_;
  std::unique_ptr<tensorboard::EventWriter> events_;
};

// A one-line progress bar redrawn in place; only the output rank draws it, on a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(int64_t total);
  void update(int64_t done, double seconds_per_iteration);
  void clear();  // before printing a log line

 private:
  int64_t total_;
  bool active_;
  bool drawn_ = false;
};

}  // namespace tessera::train
