#include "train_bench.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "tessera/core/logging.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/trainer.h"

namespace tessera::bench {

int run_train_bench(const TrainBenchOptions& options) {
  train::Config config = train::load_config(options.config, options.overrides);
  Runtime& runtime = Runtime::get();
  const Device device = runtime.select_device(config.training.device);
  train::resolve_default_precision(config, device.is_cuda());  // the JSON names the precision that ran
  train::Trainer trainer(config, device);
  const train::TrainingSummary s = trainer.train();
  const auto& m = config.model;
  const auto& t = config.training;
  const auto& p = config.parallel;
  std::ostringstream json;
  json.precision(6);
  json << "{\"benchmark\": \"train\", \"label\": \""
       << (options.label.empty() ? std::filesystem::path(options.config).filename().string() : options.label)
       << "\", \"device\": \"" << device.name() << "\", \"world_size\": " << runtime.world_size()
       << ", \"tensor_model_parallel_size\": " << p.tensor_model_parallel_size
       << ", \"pipeline_model_parallel_size\": " << p.pipeline_model_parallel_size
       << ", \"sequence_parallel\": " << (p.sequence_parallel ? "true" : "false")
       << ", \"num_layers\": " << m.num_layers << ", \"hidden_size\": " << m.hidden_size
       << ", \"num_attention_heads\": " << m.num_attention_heads << ", \"seq_length\": " << m.seq_length
       << ", \"micro_batch_size\": " << t.micro_batch_size << ", \"global_batch_size\": " << t.global_batch_size
       << ", \"precision\": \"" << t.precision << "\", \"train_iters\": " << t.train_iters
       << ", \"timed_iterations\": " << s.timed_iterations << ", \"first_timed_iteration\": " << s.first_timed_iteration
       << ", \"last_timed_iteration\": " << s.last_timed_iteration << ", \"tokens_per_second\": " << s.tokens_per_second
       << ", \"ms_per_step\": " << s.seconds_per_iteration * 1e3 << ", \"tflops_per_device\": " << s.tflops_per_device
       << ", \"mfu\": " << s.mfu << ", \"flop_convention\": \"6N + 12*L*h*s per token, N = parameters without "
       << "position embeddings; peak " << (config.training.peak_tflops_per_device > 0
                                               ? config.training.peak_tflops_per_device
                                               : (device.is_cuda() ? 989.0 : 0.0))
       << " TFLOP/s per device\", \"peak_device_memory_mib\": " << static_cast<double>(s.peak_device_bytes) / (1 << 20)
       << ", \"peak_activation_memory_mib\": " << static_cast<double>(s.peak_activation_bytes) / (1 << 20)
       << ", \"recompute\": \"" << p.recompute_granularity
       << (p.recompute_granularity == "full" ? " " + p.recompute_method + " " + std::to_string(p.recompute_num_layers) : "")
       << "\", \"memory_estimate\": " << train::memory_report_json(trainer.setup().memory)
       << ", \"final_lm_loss\": " << (s.lm_loss.empty() ? 0.0 : s.lm_loss.back()) << "}";
  if (log::is_output_rank()) std::cout << json.str() << std::endl;
  return 0;
}

}  // namespace tessera::bench
