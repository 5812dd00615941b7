// tessera-train as a child process, for the checkpoint failure-safety tests (a SIGKILL or SIGTERM
// during a save, then the next run resuming): start the tiny model's training, wait, read the log,
// find the half-written temporaries a save leaves.
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
#include "tiny_training.h"

namespace tessera::test {

// Starts tessera-train on the tiny model (tiny_training.h), logging every iteration, with args
// after (add --train-iters; env: "NAME=value ..." before it), its output in log; returns the pid.
inline pid_t start_tiny_training(const std::string& args, const std::filesystem::path& log,
                                 const std::string& env = "") {
  std::string command = env + " exec " + (bin_dir() / "tessera-train").string();
  for (const std::string& o : tiny_training_overrides()) command += " --set " + o;
  command += " --log-interval 1 " + args + " > " + log.string() + " 2>&1";
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
