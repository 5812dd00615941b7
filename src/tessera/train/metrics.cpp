#include "tessera/train/metrics.h"

#include <cstdlib>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/train/tensorboard/event_writer.h"

namespace tessera::train {

namespace {
// JSON has no NaN or Infinity: a non-finite value (a diverged loss, an overflowed fp16 grad norm) is
// written as null, explicitly rather than by relying on the JSON library's default.
nlohmann::json json_number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string printf_string(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}
// A loss whose metrics name their own lm_loss (BERT's masked-LM part): the total is printed as "loss".
bool has_own_lm_loss(const IterationMetrics& m) {
  for (const auto& metric : m.loss_metrics)
    if (metric.first == "lm_loss") return true;
  return false;
}

}  // namespace

std::string format_log_line(const IterationMetrics& m) {
  std::string line = "iteration " + std::to_string(m.iteration) + "/" + std::to_string(m.train_iters) +
                     " | consumed samples " + std::to_string(m.consumed_samples) +
                     " | elapsed time per iteration (ms) " + printf_string("%.1f", m.elapsed_ms) +
                     " | learning rate " + printf_string("%.6E", m.learning_rate) + " | global batch size " +
                     std::to_string(m.global_batch_size) + (has_own_lm_loss(m) ? " | loss " : " | lm loss ") +
                     printf_string("%.6E", m.lm_loss) +
                     " | loss scale " + printf_string("%.1f", m.loss_scale) + " | grad norm " +
                     printf_string("%.3f", m.grad_norm) + " | tokens/s " + printf_string("%.0f", m.tokens_per_second) +
                     " | TFLOP/s/GPU " + printf_string("%.3f", m.tflops_per_device) + " | MFU " +
                     (m.mfu ? printf_string("%.1f%%", *m.mfu * 100.0) : std::string("n/a")) + " | skipped " +
                     std::to_string(m.skipped_iterations) + " | nan " + std::to_string(m.nan_iterations);
  for (const auto& [name, value] : m.loss_metrics) line += " | " + name + " " + printf_string("%.6E", value);
  return line;
}

double perplexity(double loss) { return std::isnan(loss) ? loss : std::exp(std::min(20.0, loss)); }

std::string format_eval_line(int64_t iteration, double eval_loss, EvalSplit split) {
  const std::string where = split == EvalSplit::valid ? "validation loss at iteration " + std::to_string(iteration)
                                                      : "test loss at iteration " + std::to_string(iteration);
  return where + " | lm loss value: " + printf_string("%.6E", eval_loss) +
         " | lm loss PPL: " + printf_string("%.6E", perplexity(eval_loss)) + " |";
}

MetricsWriter::MetricsWriter(const std::string& path, const std::string& tensorboard_dir) {
  if (!log::is_output_rank()) return;  // one writer per job: the output rank
  if (!tensorboard_dir.empty()) events_ = std::make_unique<tensorboard::EventWriter>(tensorboard_dir);
  if (path.empty()) return;
  out_.open(path, std::ios::out | std::ios::app);
  if (!out_) TESSERA_CONFIG_FAIL("logging.metrics_file: cannot open '", path, "' for writing");
}

MetricsWriter::~MetricsWriter() = default;

void MetricsWriter::write_iteration(const IterationMetrics& m) {
  if (events_) {
    for (const auto& [name, value] : m.loss_metrics) events_->scalars(m.iteration, {{"loss/" + name, value}});
    events_->scalars(m.iteration, {{"lm loss", m.lm_loss},
                                   {"learning-rate", m.learning_rate},
                                   {"grad-norm", m.grad_norm},
                                   {"loss-scale", m.loss_scale},
                                   {"throughput/tokens-per-second", m.tokens_per_second},
                                   {"throughput/tflops-per-gpu", m.tflops_per_device},
                                   {"iteration-time-ms", m.elapsed_ms},
                                   {"mem-max-allocated-bytes", static_cast<double>(m.peak_memory_bytes)}});
  }
  if (!enabled()) return;
  nlohmann::json row = {{"iteration", m.iteration},
                        {"lm_loss", json_number(m.lm_loss)},
                        {"grad_norm", json_number(m.grad_norm)},
                        {"learning_rate", json_number(m.learning_rate)},
                        {"loss_scale", json_number(m.loss_scale)},
                        {"consumed_samples", m.consumed_samples},
                        {"tokens_per_second", json_number(m.tokens_per_second)},
                        {"tflops_per_gpu", json_number(m.tflops_per_device)},
                        {"mfu", m.mfu ? json_number(*m.mfu) : nlohmann::json(nullptr)},
                        {"skipped_iterations", m.skipped_iterations},
                        {"nan_iterations", m.nan_iterations},
                        {"elapsed_ms", json_number(m.elapsed_ms)},
                        {"peak_memory_bytes", m.peak_memory_bytes}};
  for (const auto& [name, value] : m.loss_metrics) {
    if (name == "lm_loss") row["loss"] = json_number(m.lm_loss);  // BERT: the total beside its lm_loss
    row[name] = json_number(value);
  }
  if (!m.moe_expert_load.empty()) {
    nlohmann::json load = nlohmann::json::object(), dropped = nlohmann::json::object();
    for (const auto& [layer, shares] : m.moe_expert_load) {
      nlohmann::json list = nlohmann::json::array();
      for (double v : shares) list.push_back(json_number(v));
      load[std::to_string(layer)] = list;
    }
    for (const auto& [layer, n] : m.moe_dropped_slots) dropped[std::to_string(layer)] = json_number(n);
    row["moe_expert_load"] = load;
    row["moe_dropped_slots"] = dropped;
  }
  out_ << row.dump() << "\n";
  out_.flush();
  if (!out_) TESSERA_FAIL("writing the metrics file failed (disk full?)");
}

void MetricsWriter::write_eval(int64_t iteration, double eval_loss, EvalSplit split,
                               const std::vector<std::pair<std::string, double>>& metrics) {
  const bool valid = split == EvalSplit::valid;
  const std::string tag = valid ? "lm loss validation" : "lm loss test", field = valid ? "eval" : "test";
  if (events_) events_->scalars(iteration, {{tag, eval_loss}, {tag + " ppl", perplexity(eval_loss)}});
  if (!enabled()) return;
  nlohmann::json row = {{"iteration", iteration},
                        {field + "_loss", json_number(eval_loss)},
                        {field + "_perplexity", json_number(perplexity(eval_loss))}};
  for (const auto& [name, value] : metrics) row[field + "_" + name] = json_number(value);
  out_ << row.dump() << "\n";
  out_.flush();
  if (!out_) TESSERA_FAIL("writing the metrics file failed (disk full?)");
}

namespace {
// mpirun and srun hand ranks a pseudo-terminal even when the job's output goes to a file, so a
// rank's isatty() says nothing about where the bar would end up: under a launcher, no bar.
bool under_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "SLURM_PROCID"})
    if (std::getenv(name)) return true;
  return false;
}
}  // namespace

ProgressBar::ProgressBar(int64_t total)
    : total_(total), active_(log::is_output_rank() && isatty(STDOUT_FILENO) == 1 && !under_launcher()) {}

void ProgressBar::update(int64_t done, double seconds_per_iteration) {
  if (!active_) return;
  constexpr int kWidth = 30;
  int filled = total_ ? static_cast<int>(kWidth * done / total_) : kWidth;
  double eta = seconds_per_iteration * static_cast<double>(total_ - done);
  std::string bar(filled, '=');
  bar += std::string(kWidth - filled, ' ');
  std::printf("\r[%s] %lld/%lld  ETA %dm%02ds", bar.c_str(), static_cast<long long>(done),
              static_cast<long long>(total_), static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  std::fflush(stdout);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!active_ || !drawn_) return;
  std::printf("\r%*s\r", 60, "");
  std::fflush(stdout);
  drawn_ = false;
}

}  // namespace tessera::train
