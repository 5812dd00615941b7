// tessera-bench train: training throughput of a config (default: the GPT-2 124M benchmark shape on
// one GPU) through the real Trainer, printed as one JSON object: tokens/s, ms per step, TFLOP/s and
// MFU per device (FLOP convention 6N + 12 L h s per token, N without position embeddings) and peak
// memory. The first iteration run (one-time costs; 1, or the one after a loaded checkpoint) is
// excluded from the timing; timed_iterations, first_ and last_timed_iteration say what was timed.
#pragma once
#include <string>
#include <vector>

namespace tessera::bench {

struct TrainBenchOptions {
  std::string config;                  // a tessera-train TOML file
  std::vector<std::string> overrides;  // --set table.key=value
  std::string label;                   // free text copied into the JSON ("" -> the config's file name)
};

int run_train_bench(const TrainBenchOptions& options);

}  // namespace tessera::bench
