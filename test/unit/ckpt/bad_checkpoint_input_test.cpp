// Issue 23's checkpoint items: a flipped bit in common.h5's fields (item 4), a checkpoint whose
// folder, tracker and stored iteration disagree (item 4), checkpoint.load naming an iter_ folder
// or a file (item 13).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tessera/ckpt/h5_file.h"
#include "tessera/ckpt/piece_index.h"
#include "tessera/core/error.h"
#include "tessera/train/trainer.h"
#include "tiny_training.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

train::Config config(int64_t iters, const std::vector<std::string>& extra = {}) {
  return test::tiny_training_config(iters, extra);
}

class BadCheckpointInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_ckpt_bad_input_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    train::Trainer(config(2, {"checkpoint.save=" + dir_.string()}), Device::cpu()).train();
    common_ = dir_ / "iter_0000002" / "common.h5";
    ASSERT_TRUE(fs::exists(common_));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The message of the Error that loading throws ("" when it loads); `iterations_run` gets how
  // many iterations a 4-iteration run then trains.
  std::string load_error(const std::string& load, size_t* iterations_run = nullptr) {
    try {
      train::Trainer trainer(config(4, {"checkpoint.load=" + load}), Device::cpu());
      auto summary = trainer.train();
      if (iterations_run) *iterations_run = summary.lm_loss.size();
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  }

  // XORs `mask` into the int64 attribute `name` of `group` (element `index`) in common.h5 (or `path`).
  void flip(const char* group, const char* name, int64_t mask, const fs::path& path = {}, int index = 0) {
    hid_t file = H5Fopen((path.empty() ? common_ : path).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    hid_t g = H5Oopen(file, group, H5P_DEFAULT);
    hid_t attr = H5Aopen(g, name, H5P_DEFAULT);
    ASSERT_GE(attr, 0);
    int64_t values[8] = {};
    ASSERT_GE(H5Aread(attr, H5T_NATIVE_INT64, values), 0);
    values[index] ^= mask;
    ASSERT_GE(H5Awrite(attr, H5T_NATIVE_INT64, values), 0);
    H5Aclose(attr);
    H5Oclose(g);
    H5Fclose(file);
  }

  // Rewrites the piece index of `group` in `path` from its datasets' (damaged) attributes, as a tool
  // that edits them in place must (ckpt/piece_index.h): the reader then reads the damage either way.
  static void reindex(const fs::path& path, const char* group) {
    ckpt::H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ASSERT_GE(file.get(), 0);
    ckpt::write_piece_index(ckpt::h5_open_group(file.get(), group).get());
  }

  fs::path dir_, common_;
};

TEST_F(BadCheckpointInput, UndamagedResumesAtItsIteration) {
  size_t run = 0;
  EXPECT_EQ(load_error(dir_.string(), &run), "");
  EXPECT_EQ(run, 2u);  // iterations 3 and 4
}

TEST_F(BadCheckpointInput, FlippedBitInProgressIterationFailsTheChecksum) {
  flip("progress", "iteration", int64_t{1} << 35);  // "resuming from iteration 34359738370" before
  std::string error = load_error(dir_.string());
  EXPECT_NE(error.find(common_.string()), std::string::npos) << error;
  EXPECT_NE(error.find("checksum"), std::string::npos) << error;
}

TEST_F(BadCheckpointInput, FlippedBitInConsumedSamplesFailsTheChecksum) {
  flip("progress", "consumed_samples", 4);
  std::string error = load_error(dir_.string());
  EXPECT_NE(error.find("checksum"), std::string::npos) << error;
}

TEST_F(BadCheckpointInput, FolderNameAndStoredIterationMustAgree) {
  fs::rename(dir_ / "iter_0000002", dir_ / "iter_0000007");
  std::ofstream(dir_ / "latest_checkpointed_iteration.txt") << "7";
  std::string error = load_error(dir_.string());
  EXPECT_NE(error.find("iter_0000007"), std::string::npos) << error;
  EXPECT_NE(error.find("holds iteration 2"), std::string::npos) << error;
}

TEST_F(BadCheckpointInput, LoadNamingAnIterationFolderLoadsThatIteration) {
  size_t run = 0;
  EXPECT_EQ(load_error((dir_ / "iter_0000002").string(), &run), "");
  EXPECT_EQ(run, 2u);
  EXPECT_EQ(load_error((dir_ / "iter_0000002").string() + "/", &run), "");
  EXPECT_EQ(run, 2u);
}

// Found by test/fuzz/fuzz_checkpoint_attrs: split_axis 1 with split_offset -5 wrote before the
// assembled tensor (heap-buffer-overflow under ASan).
TEST_F(BadCheckpointInput, DamagedTensorLayoutAttributesAreErrorsNotOverflows) {
  const fs::path shard = dir_ / "iter_0000002" / "mp_rank_00_000.h5";
  const char* tensor = "model/embedding.word_embeddings.weight";
  flip(tensor, "split_axis", -1 ^ 1, shard);     // -1 -> 1
  flip(tensor, "split_offset", 0 ^ -5, shard);   // 0 -> -5
  reindex(shard, "model");
  std::string error = load_error(dir_.string());
  EXPECT_NE(error.find("split_offset -5"), std::string::npos) << error;
  EXPECT_NE(error.find(shard.string()), std::string::npos) << error;
}

TEST_F(BadCheckpointInput, LocalShapeLargerThanTheGlobalOneIsAnError) {
  const fs::path shard = dir_ / "iter_0000002" / "mp_rank_00_000.h5";
  const char* tensor = "model/decoder.layers.0.mlp.linear_fc1.weight";
  flip(tensor, "split_axis", -1 ^ 0, shard);  // -1 -> 0
  flip(tensor, "local_shape", 16 ^ 17, shard, 1);  // [64, 16] -> [64, 17]
  reindex(shard, "model");
  std::string error = load_error(dir_.string());
  EXPECT_NE(error.find("corrupt"), std::string::npos) << error;
}

// Found by test/fuzz/fuzz_checkpoint_attrs: a damaged shape sized a 567 GB allocation before any
// check compared it with the stored data.
TEST_F(BadCheckpointInput, HugeStoredShapeIsAnErrorNotAnAllocation) {
  const fs::path shard = dir_ / "iter_0000002" / "mp_rank_00_000.h5";
  const char* tensor = "model/decoder.layers.0.mlp.linear_fc1.weight";
  flip(tensor, "split_axis", -1 ^ 0, shard);  // -1 -> 0: a shard of 64 rows ...
  flip(tensor, "global_shape", 64 ^ (int64_t{1} << 36), shard, 0);  // ... of 2^36 rows
  reindex(shard, "model");
  std::string error = load_error(dir_.string());
  EXPECT_NE(error.find("cover 64 of 68719476736"), std::string::npos) << error;
}

TEST_F(BadCheckpointInput, LoadNamingAFileIsAConfigError) {
  EXPECT_THROW(config(4, {"checkpoint.load=" + common_.string()}), ConfigError);
}

}  // namespace
}  // namespace tessera
