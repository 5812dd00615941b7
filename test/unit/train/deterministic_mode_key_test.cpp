// training.deterministic_mode (Megatron's --deterministic-mode): a boolean key, default false, that a
// wrong type names; tessera-train --help lists it; the trainer hands it to the ops (the process-wide
// ops::deterministic_mode() the CUDA kernels read) before any op runs; and on the CPU, which is
// deterministic either way, it changes nothing in the losses.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/deterministic_mode.h"
#include "tessera/train/config.h"
#include "tessera/train/trainer.h"
#include "test_paths.h"

namespace tessera {
namespace {

std::vector<std::string> base(std::vector<std::string> sets = {}) {
  std::vector<std::string> all = {"data.mock_data=true", "data.vocab_size=50"};
  all.insert(all.end(), sets.begin(), sets.end());
  return all;
}

std::string config_error(const std::string& set) {
  try {
    train::load_config("", base({set}));
  } catch (const ConfigError& e) {
    return e.message();
  }
  return "";
}

TEST(DeterministicModeKey, DefaultsToFalseAndIsAccepted) {
  train::Config c = train::load_config("", base());
  EXPECT_FALSE(c.training.deterministic_mode);
  EXPECT_NE(c.to_toml().find("deterministic_mode = false"), std::string::npos) << c.to_toml();
  c = train::load_config("", base({"training.deterministic_mode=true"}));
  EXPECT_TRUE(c.training.deterministic_mode);
  EXPECT_NE(c.to_toml().find("deterministic_mode = true"), std::string::npos) << c.to_toml();
}

TEST(DeterministicModeKey, WrongTypesNameTheKeyAndTheType) {
  const struct { const char* set; const char* got; } cases[] = {
      {"training.deterministic_mode=1", "got integer"},
      {"training.deterministic_mode=\"yes\"", "got string"},
      {"training.deterministic_mode=0.5", "got number"},
      {"training.deterministic_mode=[true]", "got array"},
  };
  for (const auto& c : cases) {
    const std::string e = config_error(c.set);
    EXPECT_NE(e.find("training.deterministic_mode"), std::string::npos) << c.set << ": " << e;
    EXPECT_NE(e.find("boolean"), std::string::npos) << c.set << ": " << e;
    EXPECT_NE(e.find(c.got), std::string::npos) << c.set << ": " << e;
  }
}

TEST(DeterministicModeKey, ListedByTesseraTrainHelp) {
  FILE* pipe = popen(((test::bin_dir() / "tessera-train").string() + " --help 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_NE(output.find("deterministic_mode = false"), std::string::npos) << output;
  EXPECT_NE(output.find("--deterministic-mode"), std::string::npos) << output;  // the description names Megatron's
}

train::Config tiny(bool deterministic) {
  return train::load_config(
      "", base({"model.num_layers=1", "model.hidden_size=16", "model.num_attention_heads=2", "model.seq_length=8",
                "training.micro_batch_size=2", "training.global_batch_size=2", "training.train_iters=3",
                "training.eval_interval=0", "optimizer.lr_warmup_iters=1", "logging.log_interval=100",
                std::string("training.deterministic_mode=") + (deterministic ? "true" : "false")}));
}

TEST(DeterministicModeKey, TheTrainerSetsTheOpsModeAndTheCpuLossesDoNotChange) {
  ops::set_deterministic_mode(false);
  train::Trainer on(tiny(true), Device::cpu());
  EXPECT_TRUE(ops::deterministic_mode());
  const auto with_flag = on.train();
  train::Trainer off(tiny(false), Device::cpu());
  EXPECT_FALSE(ops::deterministic_mode());
  const auto without = off.train();
  ASSERT_EQ(with_flag.lm_loss.size(), 3u);
  EXPECT_EQ(with_flag.lm_loss, without.lm_loss);  // the CPU reference is deterministic either way
  EXPECT_EQ(with_flag.grad_norm, without.grad_norm);
}

}  // namespace
}  // namespace tessera
