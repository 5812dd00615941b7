// What tessera-bench train and the Trainer say they timed: every iteration a run makes except its
// first (one-time costs), so 2..N for a fresh run and resume+2..N after loading a checkpoint; the
// JSON's timed_iterations and the "training finished" line count them where they are timed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_paths.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct Run {
  int exit_code;
  std::string output;  // stdout and stderr together
};

Run run(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  if (pipe == nullptr) return {-1, ""};
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// The {"benchmark": ...} line of tessera-bench's output (null when there is none).
nlohmann::json bench_json(const std::string& output) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("{\"benchmark\"", 0) == 0) return nlohmann::json::parse(line);
  return nullptr;
}

const char* kTinyModel =
    " --set data.mock_data=true --set data.vocab_size=40 --set model.num_layers=1 --set model.hidden_size=16"
    " --set model.num_attention_heads=2 --set model.seq_length=8 --set model.max_position_embeddings=8"
    " --set training.micro_batch_size=2 --set training.global_batch_size=2 --set training.eval_interval=0"
    " --set training.device=cpu --set optimizer.lr_warmup_iters=1 --set logging.log_interval=100";

TEST(BenchTiming, FreshAndResumedRunsReportTheIterationsTheyTimed) {
  const fs::path dir = fs::temp_directory_path() / ("tessera_bench_timing_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  { std::ofstream(dir / "empty.toml") << "# defaults and --set overrides only\n"; }
  const std::string bench = (test::bin_dir() / "tessera-bench").string() + " train --config " +
                            (dir / "empty.toml").string() + kTinyModel + " --set checkpoint.save=" +
                            (dir / "ckpt").string();
  auto fresh = run(bench + " --set training.train_iters=3");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  auto json = bench_json(fresh.output);
  ASSERT_TRUE(json.is_object()) << fresh.output;
  EXPECT_EQ(json["timed_iterations"], 2) << json.dump();
  EXPECT_EQ(json["first_timed_iteration"], 2) << json.dump();
  EXPECT_EQ(json["last_timed_iteration"], 3) << json.dump();
  EXPECT_GT(json["tokens_per_second"].get<double>(), 0.0) << json.dump();
  EXPECT_NE(fresh.output.find("training finished: iterations 1..3 of 3, "), std::string::npos) << fresh.output;
  EXPECT_NE(fresh.output.find(" tokens/s on average over 2 timed iterations (2..3)"), std::string::npos) << fresh.output;

  // Resumed at 3, trained to 7: iteration 4 pays the one-time costs, 5..7 are timed.
  auto resumed = run(bench + " --set training.train_iters=7 --set checkpoint.load=" + (dir / "ckpt").string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  json = bench_json(resumed.output);
  ASSERT_TRUE(json.is_object()) << resumed.output;
  EXPECT_EQ(json["timed_iterations"], 3) << json.dump();
  EXPECT_EQ(json["first_timed_iteration"], 5) << json.dump();
  EXPECT_EQ(json["last_timed_iteration"], 7) << json.dump();
  EXPECT_NE(resumed.output.find("training finished: iterations 4..7 of 7, "), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find(" over 3 timed iterations (5..7)"), std::string::npos) << resumed.output;

  // One iteration run: nothing timed, and the JSON says so instead of claiming train_iters - 1.
  auto single = run(bench + " --set training.train_iters=8 --set checkpoint.load=" + (dir / "ckpt").string());
  ASSERT_EQ(single.exit_code, 0) << single.output;
  json = bench_json(single.output);
  ASSERT_TRUE(json.is_object()) << single.output;
  EXPECT_EQ(json["timed_iterations"], 0) << json.dump();
  EXPECT_EQ(json["tokens_per_second"].get<double>(), 0.0) << json.dump();
  EXPECT_NE(single.output.find("training finished: iterations 8..8 of 8, no iteration timed"), std::string::npos)
      << single.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
