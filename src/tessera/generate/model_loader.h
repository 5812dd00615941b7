// What tessera-generate runs on: the parallel layout, this rank's GPT stage loaded from --load (a
// Tessera checkpoint, resharded on load by the trainer's checkpoint code, or a Hugging Face folder
// imported first by convert::import_hf into a temporary checkpoint on each node), the tokenizer
// (when one is configured or the HF folder has vocab.json + merges.txt) and the default stop token.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"
#include "tessera/models/gpt.h"
#include "tessera/models/t5.h"
#include "tessera/runtime/parallel_context.h"
#include "tessera/train/config.h"

namespace tessera::generate {

struct GenerationSetup {
  train::Config config;
  Device device;
  std::unique_ptr<parallel::ParallelContext> context;
  std::unique_ptr<models::StageModel> model;
  models::GPTModel* gpt = nullptr;
  models::T5Model* t5 = nullptr;  // model.architecture = t5 (gpt is then null): generate/t5_generator.h
  std::unique_ptr<data::Tokenizer> tokenizer;  // null: prompts as ids only, no text
  int64_t eod = -1;                            // the tokenizer's end of document / HF eos_token_id
  std::filesystem::path imported;              // the temporary import of an HF folder (removed at exit)
  ~GenerationSetup();
};

// Collective over the world. ConfigError naming the path or key on bad input.
// random_init (benchmarks): no checkpoint; the model keys come from config_file / overrides (vocabulary
// size data.vocab_size, default 50257) and the weights from training.seed.
std::unique_ptr<GenerationSetup> load_for_generation(const std::string& load, const std::string& config_file,
                                                     const std::vector<std::string>& overrides,
                                                     bool random_init = false);

}  // namespace tessera::generate
