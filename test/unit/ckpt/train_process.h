// tessera-train as a child process, for the checkpoint failure-safety tests (a SIGKILL or SIGTERM
// during a save, then the next run resuming): a tiny mock-data model's arguments, start, wait, the
// log, the half-written temporaries a save leaves.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tessera/ckpt/checkpoint_layout.h"
#include "test_paths.h"

namespace tessera::test {

// A one-layer, 16-wide GPT on mock data, logging every iteration (add --train-iters).
inline const char* kTinyTrainArgs =
    "--set data.mock_data=true --set data.vocab_size=40 --set model.num_layers=1 --set model.hidden_size=16 "
    "--set model.num_attention_heads=2 --set model.seq_length=8 --micro-batch-size 2 --global-batch-size 4 "
    "--set training.eval_interval=0 --set optimizer.lr_warmup_iters=1 --log-interval 1 ";

// Starts tessera-train with kTinyTrainArgs + args (env: "NAME=value ..." before it), its output in
// log; returns the pid.
inline pid_t start_tiny_training(const std::string& args, const std::filesystem::path& log,
                                 const std::string& env = "") {
  const std::string command = env + " exec " + (bin_dir() / "tessera-train").string() + " " + kTinyTrainArgs + args +
                              " > " + log.string() + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// The exit code, or minus the signal that ended it.
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

inline std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A save's temporary folder for `prefix` (iter_XXXXXXX) that already holds its common file.
inline bool has_written_temporary(const std::filesystem::path& dir, const std::string& prefix) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix + ".tmp-", 0) == 0 && std::filesystem::exists(entry.path() / ckpt::kCommonFile)) return true;
  }
  return false;
}

// Polls pred every 20 ms until it holds (true) or limit passes (false).
template <typename Pred>
bool wait_for(Pred pred, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace tessera::test
