// The tiny GPT the checkpoint tests train (in process through train::Trainer,
// or as a tessera-train child process, train_process.h): one layer, 16 wide, 2
// heads, 8 tokens, vocabulary 40, mock data, micro-batch 2 of a global batch 4,
// no evaluation, one warm-up iteration.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/train/config.h"

namespace tessera::test {

// The model, data, batch and schedule keys as table.key=value overrides.
inline std::vector<std::string> tiny_training_overrides() {
  return {"data.mock_data=true",         "data.vocab_size=40",
          "model.num_layers=1",          "model.hidden_size=16",
          "model.num_attention_heads=2", "model.seq_length=8",
          "training.micro_batch_size=2", "training.global_batch_size=4",
          "training.eval_interval=0",    "optimizer.lr_warmup_iters=1"};
}

// The tiny model trained for `iters` iterations, logging every 100, with
// `extra` overrides after.
inline train::Config
tiny_training_config(int64_t iters,
                     const std::vector<std::string> &extra = {}) {
  std::vector<std::string> o = tiny_training_overrides();
  o.push_back("training.train_iters=" + std::to_string(iters));
  o.push_back("logging.log_interval=100");
  o.insert(o.end(), extra.begin(), extra.end());
  return train::load_config("", o);
}

} // namespace tessera::test
