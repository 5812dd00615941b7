// Asynchronous checkpoint save (checkpoint.async_save): the checkpoints it writes hold exactly the
// values a synchronous save writes (h5diff: every dataset and attribute), the training continues
// identically, and a writer that fails (file size limit standing in for a full disk) ends the run
// with exit 1, its message and no temporary folder left.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/train/trainer.h"
#include "test_paths.h"
#include "tiny_training.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

train::Config config(const fs::path& save, bool async) {
  return test::tiny_training_config(7, {"checkpoint.save_interval=2", "checkpoint.save=" + save.string(),
                                        std::string("checkpoint.async_save=") + (async ? "true" : "false")});
}

TEST(AsyncSave, WritesTheSameCheckpointsAsASynchronousSave) {
  fs::path base = fs::temp_directory_path() / ("tessera_async_save_" + std::to_string(::getpid()));
  fs::remove_all(base);
  auto sync = train::Trainer(config(base / "sync", false), Device::cpu()).train();
  auto async = train::Trainer(config(base / "async", true), Device::cpu()).train();
  ASSERT_EQ(sync.lm_loss.size(), 7u);
  EXPECT_EQ(sync.lm_loss, async.lm_loss);  // the snapshot, not the live tensors, went to disk
  for (const char* iter : {"iter_0000002", "iter_0000004", "iter_0000006", "iter_0000007"}) {
    ASSERT_TRUE(fs::is_directory(base / "async" / iter)) << iter;
    int files = 0;
    for (const auto& entry : fs::directory_iterator(base / "sync" / iter)) {
      fs::path other = base / "async" / iter / entry.path().filename();
      ASSERT_TRUE(fs::exists(other)) << other;
      // config_toml differs by design (checkpoint.save and checkpoint.async_save are in it).
      std::string command = "h5diff -q --exclude-path /config_toml " + entry.path().string() + " " + other.string() + " >/dev/null 2>&1";
      int rc = std::system(command.c_str());
      if (WIFEXITED(rc) && WEXITSTATUS(rc) == 127) GTEST_SKIP() << "h5diff (hdf5-tools) not installed";
      EXPECT_EQ(rc, 0) << "h5diff " << entry.path() << " " << other;
      ++files;
    }
    EXPECT_GE(files, 2) << iter;
  }
  std::ifstream tracker(base / "async" / "latest_checkpointed_iteration.txt");
  std::string latest;
  tracker >> latest;
  EXPECT_EQ(latest, "7");
  for (const auto& entry : fs::directory_iterator(base / "async"))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  fs::remove_all(base);
}

TEST(AsyncSave, AFailingWriterEndsTheRunCleanly) {
  fs::path dir = fs::temp_directory_path() / ("tessera_async_full_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string command =
      "trap '' XFSZ; ulimit -f 16384; " + (test::bin_dir() / "tessera-train").string() +
      " --set model.num_layers=2 --set model.hidden_size=512 --set model.num_attention_heads=2 --set model.seq_length=16"
      " --set training.global_batch_size=4 --set training.train_iters=4 --set data.mock_data=true"
      " --set data.vocab_size=100 --set optimizer.lr_warmup_iters=1 --set checkpoint.save_interval=1"
      " --set checkpoint.async_save=true --set checkpoint.save=" + dir.string() + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 1) << output;
  EXPECT_NE(output.find("File too large"), std::string::npos) << output;
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  EXPECT_FALSE(fs::exists(dir / "latest_checkpointed_iteration.txt"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
