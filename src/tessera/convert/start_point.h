// Where a tessera-train run starts from, resolved before its config is final: the [model] keys of
// the checkpoint it resumes or finetunes from (or of checkpoint.pretrained_hf's config.json) become
// defaults below the user's file and --set keys, so a user does not repeat them. With
// checkpoint.pretrained_hf and nothing to resume in checkpoint.load, world rank 0 imports the HF
// model into <save>/pretrained_hf (TP=1 x PP=1, fp32; the trainer reshards on load) and the run
// loads it with finetune.
#pragma once
#include <string>
#include <vector>

#include "tessera/train/config.h"

namespace tessera::convert {

struct StartPoint {
  std::vector<std::string> defaults;  // inherited [model] keys: before the user's overrides
  std::vector<std::string> forced;    // pretrained_hf: the imported folder as checkpoint.load, finetune = true
  bool empty() const { return defaults.empty() && forced.empty(); }
};

// Collective over MPI_COMM_WORLD when an import runs (rank 0 imports, the others wait at a
// barrier). ConfigError naming the key or file on bad input.
StartPoint start_point(const train::Config& config, const std::vector<std::string>& overrides);

}  // namespace tessera::convert
