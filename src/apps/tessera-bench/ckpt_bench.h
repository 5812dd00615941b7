// tessera-bench ckpt: save and load bandwidth of a Tessera HDF5 checkpoint (model + AdamW state) for
// a GPT built on the CPU (default GPT-2 small, 124M parameters), printed as JSON.
#pragma once
#include <cstdint>
#include <string>

namespace tessera::bench {

struct CkptBenchOptions {
  std::string dir;                  // where checkpoints are written ("" -> a temporary folder, removed)
  int64_t num_layers = 12, hidden_size = 768, num_attention_heads = 12, vocab_size = 50257, seq_length = 1024;
  int repeats = 3;                  // save + load rounds (each on a fresh iteration folder)
};

// Returns the process exit code (non-zero when the loaded state differs from the saved one).
int run_ckpt_bench(const CkptBenchOptions& options);

}  // namespace tessera::bench
