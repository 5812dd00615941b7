// The tessera-train executable: exit code 2 with a message naming the key for config errors,
// 0 for --help and --version, and a short run that writes the INTERFACE.md metrics rows.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct Run {
  int exit_code;
  std::string output;  // stdout and stderr together
};

Run run(const std::string& args) {
  std::string command = (test::bin_dir() / "tessera-train").string() + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST(TrainCli, HelpAndVersion) {
  auto help = run("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--config"), std::string::npos);
  EXPECT_NE(help.output.find("hidden_size = 768"), std::string::npos);  // config keys with defaults
  auto version = run("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.output.find("tessera-train"), std::string::npos);
}

TEST(TrainCli, ConfigErrorsExitWithTwoAndNameTheKey) {
  auto unknown = run("--set data.mock_data=true --set data.vocab_size=10 --set model.hiden_size=4");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("model.hidden_size"), std::string::npos) << unknown.output;
  auto missing = run("--config /nonexistent/run.toml");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("/nonexistent/run.toml"), std::string::npos) << missing.output;
  auto bad_option = run("--no-such-option");
  EXPECT_EQ(bad_option.exit_code, 2) << bad_option.output;
}

TEST(TrainCli, RecomputeConfigErrorsExitWithTwoAndNameTheKeys) {
  const std::string small = "--set data.mock_data=true --set data.vocab_size=10 --set model.num_layers=4 "
                            "--set model.hidden_size=16 --set model.num_attention_heads=2 --set model.seq_length=8 "
                            "--set training.device=cpu --set training.train_iters=1 ";
  auto granularity = run(small + "--set parallel.recompute_granularity=partial");
  EXPECT_EQ(granularity.exit_code, 2) << granularity.output;
  EXPECT_NE(granularity.output.find("parallel.recompute_granularity = \"partial\" is not allowed"), std::string::npos)
      << granularity.output;
  auto method = run(small + "--set parallel.recompute_granularity=full --set parallel.recompute_method=blocks");
  EXPECT_EQ(method.exit_code, 2) << method.output;
  EXPECT_NE(method.output.find("parallel.recompute_method = \"blocks\" is not allowed"), std::string::npos)
      << method.output;
  auto zero = run(small + "--set parallel.recompute_granularity=full --set parallel.recompute_num_layers=0");
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  EXPECT_NE(zero.output.find("parallel.recompute_num_layers = 0 must be at least 1"), std::string::npos) << zero.output;
  auto too_many = run(small + "--set parallel.recompute_granularity=full --set parallel.recompute_method=block "
                              "--set parallel.recompute_num_layers=5");
  EXPECT_EQ(too_many.exit_code, 2) << too_many.output;
  EXPECT_NE(too_many.output.find("parallel.recompute_num_layers = 5 is larger than the 4 layers"), std::string::npos)
      << too_many.output;
  auto fits = run(small + "--set parallel.recompute_granularity=full --set parallel.recompute_num_layers=4 "
                          "--print-config");
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
}

TEST(TrainCli, ShortRunWritesMetricsRows) {
  fs::path metrics = fs::temp_directory_path() / ("tessera_cli_metrics_" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(metrics);
  auto result = run(
      "--set data.mock_data=true --set data.vocab_size=40 --set model.num_layers=1 --set model.hidden_size=16 "
      "--set model.num_attention_heads=2 --set model.seq_length=8 --micro-batch-size 2 --global-batch-size 4 "
      "--train-iters 4 --log-interval 2 --set training.eval_interval=4 --set training.eval_iters=1 "
      "--set optimizer.lr_warmup_iters=1 --metrics-file " + metrics.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("padded vocab (size: 40) with 88 dummy tokens (new size: 128)"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("iteration 4/4 | consumed samples 16 |"), std::string::npos) << result.output;
  std::ifstream in(metrics);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 4u);  // iterations 2 and 4, the evaluation at 4, then the test split at the end
  for (const char* key : {"iteration", "lm_loss", "grad_norm", "learning_rate", "loss_scale", "consumed_samples",
                          "tokens_per_second", "tflops_per_gpu", "mfu", "skipped_iterations", "nan_iterations"})
    EXPECT_TRUE(rows[0].contains(key)) << key;
  EXPECT_EQ(rows[1]["iteration"], 4);
  EXPECT_EQ(rows[1]["consumed_samples"], 16);
  EXPECT_TRUE(rows[2].contains("eval_loss"));
  EXPECT_TRUE(rows[2].contains("eval_perplexity"));
  EXPECT_EQ(rows[3]["iteration"], 4);
  EXPECT_TRUE(rows[3].contains("test_loss"));
  EXPECT_TRUE(rows[3].contains("test_perplexity"));
  fs::remove(metrics);
}

}  // namespace
}  // namespace tessera
