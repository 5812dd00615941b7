// Issue 23, acceptance 3 (CPU part): SIGKILL of the whole job while an asynchronous checkpoint
// save is in flight (its writer thread has written the files, training has gone on, nothing is
// committed) leaves the tracker on the previous checkpoint, which loads, and the next run resumes
// from it with the same losses the killed run had after that checkpoint.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "train_process.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using test::has_written_temporary;
using test::read_all;
using test::wait_exit_code;
// The killed run and the resumed one both train to iteration 8.
pid_t start(const std::string& args, const fs::path& log, const std::string& env = "") {
  return test::start_tiny_training("--train-iters 8 " + args, log, env);
}

// The "lm loss ..." field of iteration `iteration`'s log line ("" when not logged).
std::string loss_at(const std::string& log, int iteration) {
  std::smatch m;
  std::regex line("iteration " + std::to_string(iteration) + "/8 \\|[^\\n]*\\| lm loss ([^ |]+)");
  return std::regex_search(log, m, line) ? m[1].str() : std::string();
}

TEST(AsyncSaveKill, SigkillDuringAnAsyncSaveKeepsThePreviousCheckpointAndTheRunResumesFromIt) {
  fs::path dir = fs::temp_directory_path() / ("tessera_async_kill_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::path log = dir.string() + ".log", resumed_log = dir.string() + ".resumed.log";
  // Every asynchronous writer stays busy 1.5 s after writing its files (not committed yet) while
  // training goes on; the job is killed once iteration 2 is committed, iteration 4's writer runs
  // and iteration 5 has been trained.
  pid_t pid = start("--set checkpoint.save=" + dir.string() +
                        " --set checkpoint.save_interval=2 --set checkpoint.async_save=true",
                    log, "TESSERA_TEST_PAUSE_IN_ASYNC_WRITE_MS=1500");
  auto in_flight = [&] {
    auto tracker = ckpt::read_tracker(dir);
    std::string out = read_all(log);
    return tracker && tracker->iteration == 2 && has_written_temporary(dir, "iter_0000004") &&
           out.find("started asynchronous checkpoint save at iteration 4") != std::string::npos &&
           !loss_at(out, 5).empty();
  };
  bool caught = false;
  for (auto end = std::chrono::steady_clock::now() + 120s; !caught && std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(10ms))
    caught = in_flight();
  ASSERT_TRUE(caught) << read_all(log);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_EQ(wait_exit_code(pid), -SIGKILL);
  const std::string killed = read_all(log);
  EXPECT_EQ(killed.find("saved checkpoint at iteration 4"), std::string::npos) << killed;

  EXPECT_EQ(ckpt::read_tracker(dir)->iteration, 2);  // the interrupted save never became visible
  EXPECT_FALSE(fs::exists(dir / "iter_0000004"));
  EXPECT_NO_THROW(ckpt::CheckpointReader(dir / "iter_0000002"));

  // The next run resumes at iteration 3 and repeats the killed run's losses of iterations 3..5.
  pid = start("--set checkpoint.save=" + dir.string() + " --set checkpoint.load=" + dir.string(), resumed_log);
  ASSERT_EQ(wait_exit_code(pid), 0) << read_all(resumed_log);
  const std::string resumed = read_all(resumed_log);
  EXPECT_NE(resumed.find("resuming from iteration 2"), std::string::npos) << resumed;
  EXPECT_TRUE(loss_at(resumed, 1).empty()) << resumed;
  for (int iteration : {3, 4, 5}) {
    ASSERT_FALSE(loss_at(killed, iteration).empty()) << iteration << "\n" << killed;
    EXPECT_EQ(loss_at(resumed, iteration), loss_at(killed, iteration)) << iteration;
  }
  EXPECT_EQ(ckpt::read_tracker(dir)->iteration, 8);
  EXPECT_FALSE(has_written_temporary(dir, "iter_0000004"));  // the leftovers went with the next save
  fs::remove_all(dir);
  fs::remove(log);
  fs::remove(resumed_log);
}

}  // namespace
}  // namespace tessera
