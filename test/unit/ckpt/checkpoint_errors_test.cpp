// Damaged checkpoints fail cleanly: a corrupt (checksum), truncated, overwritten or missing shard
// file, a missing common.h5, and a checkpoint of another hidden size give an Error naming the file.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/ckpt/h5_file.h"
#include "tessera/train/trainer.h"
#include "tiny_training.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

train::Config config(int64_t iters, const std::vector<std::string>& extra = {}) {
  return test::tiny_training_config(iters, extra);
}

class DamagedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_ckpt_damaged_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    train::Trainer(config(2, {"checkpoint.save=" + dir_.string()}), Device::cpu()).train();
    shard_ = dir_ / "iter_0000002" / "mp_rank_00_000.h5";
    ASSERT_TRUE(fs::exists(shard_));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The message of the Error that loading the checkpoint throws ("" when it loads).
  std::string load_error(std::vector<std::string> extra = {}) {
    extra.push_back("checkpoint.load=" + dir_.string());
    try {
      train::Trainer trainer(config(4, extra), Device::cpu());
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  }

  // Overwrites `bytes` bytes at `offset` of `file` with 0x5a.
  static void overwrite(const fs::path& file, uint64_t offset, size_t bytes) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    std::string garbage(bytes, '\x5a');
    f.write(garbage.data(), static_cast<std::streamsize>(bytes));
    ASSERT_TRUE(f.good());
  }

  fs::path dir_, shard_;
};

TEST_F(DamagedCheckpoint, UndamagedLoads) { EXPECT_EQ(load_error(), ""); }

TEST_F(DamagedCheckpoint, CorruptTensorDataFailsItsChecksum) {
  // HDF5 does not checksum raw data: change bytes inside a tensor's data only.
  hid_t file = H5Fopen(shard_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t dataset = H5Dopen2(file, "model/decoder.layers.0.mlp.linear_fc1.weight", H5P_DEFAULT);
  ASSERT_GE(dataset, 0);
  haddr_t offset = H5Dget_offset(dataset);
  hsize_t size = H5Dget_storage_size(dataset);
  H5Dclose(dataset);
  H5Fclose(file);
  ASSERT_NE(offset, HADDR_UNDEF);
  overwrite(shard_, offset + size / 2, 4);
  std::string message = load_error();
  EXPECT_NE(message.find(shard_.string()), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
  EXPECT_NE(message.find("decoder.layers.0.mlp.linear_fc1.weight"), std::string::npos) << message;
}

// Files written before the lane checksum carry "checksum" (one FNV-1a chain): they still load, and
// still fail when their data is damaged.
TEST_F(DamagedCheckpoint, OneLaneChecksumOfOlderFilesIsStillVerified) {
  const char* name = "model/decoder.layers.0.mlp.linear_fc1.weight";
  haddr_t offset = HADDR_UNDEF;
  hsize_t size = 0;
  {
    hid_t file = H5Fopen(shard_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    hid_t dataset = H5Dopen2(file, name, H5P_DEFAULT);
    ASSERT_GE(dataset, 0);
    const Shape shape = ckpt::h5_dataset_shape(dataset);
    std::vector<float> data(static_cast<size_t>(shape_numel(shape)));
    ckpt::h5_read_into(dataset, DType::f32, data.data());
    ASSERT_GE(H5Adelete(dataset, "checksum8"), 0);
    ckpt::h5_set_attr(dataset, "checksum",
                      static_cast<int64_t>(ckpt::data_checksum(data.data(), data.size() * sizeof(float))));
    offset = H5Dget_offset(dataset);
    size = H5Dget_storage_size(dataset);
    H5Dclose(dataset);
    H5Fclose(file);
  }
  EXPECT_EQ(load_error(), "");
  overwrite(shard_, offset + size / 2, 4);
  const std::string message = load_error();
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
}

TEST(DataChecksumLanes, ChangesWithEveryByteWordOrderAndLength) {
  std::vector<unsigned char> bytes(1003);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + 7) % 251);
  const uint64_t base = ckpt::data_checksum_lanes(bytes.data(), bytes.size());
  EXPECT_EQ(base, ckpt::data_checksum_lanes(bytes.data(), bytes.size()));
  for (size_t i = 0; i < bytes.size(); i += 17) {  // every lane, and the tail of fewer than 64 bytes
    bytes[i] ^= 0x10;
    EXPECT_NE(ckpt::data_checksum_lanes(bytes.data(), bytes.size()), base) << "byte " << i;
    bytes[i] ^= 0x10;
  }
  std::vector<unsigned char> swapped = bytes;  // words 0 and 1 sit in different lanes
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8);
  EXPECT_NE(ckpt::data_checksum_lanes(swapped.data(), swapped.size()), base);
  std::vector<unsigned char> zeros(128, 0);  // the length counts even when the bytes are all zero
  EXPECT_NE(ckpt::data_checksum_lanes(zeros.data(), 64), ckpt::data_checksum_lanes(zeros.data(), 128));
}

TEST(DataChecksumLanes, PiecesGiveTheOneShotValueAndTheStoredFormatIsUnchanged) {
  std::vector<unsigned char> bytes(1003);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + 7) % 251);
  // Values of the format files carry (an independent Python rendering of the definition in
  // data_checksum.h): changing them would make every saved checkpoint fail its checksum.
  EXPECT_EQ(ckpt::data_checksum_lanes(bytes.data(), bytes.size()), 0xdf2feab0b1658f70ull);
  EXPECT_EQ(ckpt::data_checksum_lanes(bytes.data(), 960), 0x329ee4e228e35cecull);
  for (size_t piece : {size_t{64}, size_t{128}, size_t{640}}) {  // the reader's chunks, scaled down
    ckpt::LaneChecksum sum;
    for (size_t done = 0; done < bytes.size(); done += piece) sum.update(bytes.data() + done, std::min(piece, bytes.size() - done));
    EXPECT_EQ(sum.finish(), 0xdf2feab0b1658f70ull) << "pieces of " << piece;
  }
  ckpt::LaneChecksum uneven;
  uneven.update(bytes.data(), 100);  // not a multiple of 64 and not the last piece: refused
  EXPECT_THROW(uneven.update(bytes.data() + 100, 64), Error);
}

TEST(DataChecksumLanes, UpdateCopyGivesTheStoredValueAndCopiesToAnyAlignment) {
  std::vector<unsigned char> bytes(1003);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + 7) % 251);
  // The reader's fused pass (checksum + streaming copy): the same value as update, the bytes copied
  // exactly, at a 64-byte-aligned destination (one AVX-512 pass) and at shifted ones (separate passes).
  alignas(64) static unsigned char out[1003 + 128];
  for (size_t shift : {size_t{0}, size_t{4}, size_t{8}, size_t{33}, size_t{64}}) {
    for (size_t piece : {size_t{64}, size_t{640}, bytes.size()}) {
      std::memset(out, 0xEE, sizeof out);
      ckpt::LaneChecksum sum;
      for (size_t done = 0; done < bytes.size(); done += piece)
        sum.update_copy(out + shift + done, bytes.data() + done, std::min(piece, bytes.size() - done));
      EXPECT_EQ(sum.finish(), 0xdf2feab0b1658f70ull) << "shift " << shift << " pieces of " << piece;
      EXPECT_EQ(std::memcmp(out + shift, bytes.data(), bytes.size()), 0) << "shift " << shift << " pieces of " << piece;
      EXPECT_EQ(out[shift + bytes.size()], 0xEE) << "wrote past the end, shift " << shift;
      if (shift > 0) EXPECT_EQ(out[shift - 1], 0xEE) << "wrote before the start, shift " << shift;
    }
  }
  ckpt::LaneChecksum uneven;
  uneven.update_copy(out, bytes.data(), 100);
  EXPECT_THROW(uneven.update_copy(out + 100, bytes.data() + 100, 64), Error);
}

TEST(DataChecksumBlocks, StoredFormatValuesAndEveryBlockCounts) {
  std::vector<unsigned char> bytes((size_t{1} << 21) + 1003);  // two full 1 MiB blocks and a short one
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + 7) % 251);
  // "checksum8" as files store it (an independent Python rendering of data_checksum.h's definition).
  EXPECT_EQ(ckpt::data_checksum_blocks(bytes.data(), bytes.size()), 0xaaff5698a8012b99ull);
  EXPECT_EQ(ckpt::data_checksum_blocks(bytes.data(), 1003), 0x37b8fc4a6ef9354cull);
  EXPECT_EQ(ckpt::data_checksum_blocks(bytes.data(), 0), 0xaf63bd4c8601b7dfull);
  const uint64_t base = ckpt::data_checksum_blocks(bytes.data(), bytes.size());
  for (size_t at : {size_t{5}, (size_t{1} << 20) + 9, bytes.size() - 1}) {  // a byte in each block
    bytes[at] ^= 0x01;
    EXPECT_NE(ckpt::data_checksum_blocks(bytes.data(), bytes.size()), base) << "byte " << at;
    bytes[at] ^= 0x01;
  }
  std::vector<unsigned char> swapped = bytes;  // the same blocks in another order differ
  std::swap_ranges(swapped.begin(), swapped.begin() + (1 << 20), swapped.begin() + (1 << 20));
  EXPECT_NE(ckpt::data_checksum_blocks(swapped.data(), swapped.size()), base);
}

TEST(CheckpointLoad, LargeTensorsReadOnSeveralThreadsLoadAndAFlippedByteIsFound) {
  // A 16-wide vocabulary of 65536 rows: the embedding (4.2 MB) spans blocks enough for the threaded
  // reader; it loads, and a flipped byte deep inside it (in the second thread's run) is found. (That
  // loaded tensors equal the saved ones is what the exact-resume tests check, bitwise.)
  fs::path dir = fs::temp_directory_path() / ("tessera_threaded_read_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  train::Config c = config(2, {"data.vocab_size=65536", "checkpoint.save=" + dir.string(), "checkpoint.save_interval=1"});
  train::Trainer(c, Device::cpu()).train();
  fs::path shard = dir / "iter_0000002" / "mp_rank_00_000.h5";
  ASSERT_TRUE(fs::exists(shard));
  train::Config resume = config(4, {"data.vocab_size=65536", "checkpoint.load=" + dir.string()});
  EXPECT_NO_THROW(train::Trainer(resume, Device::cpu()));
  {
    ckpt::H5Id file = ckpt::h5_open_file_read(shard.string());
    ckpt::H5Id dataset(H5Dopen2(file.get(), "/model/embedding.word_embeddings.weight", H5P_DEFAULT));
    ASSERT_GE(dataset.get(), 0);
    const int64_t at = static_cast<int64_t>(H5Dget_offset(dataset.get())) + (int64_t{3} << 20);  // block 3 of 5: the second thread's
    file.reset();
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x04);
    f.seekp(at);
    f.write(&byte, 1);
  }
  try {
    train::Trainer trainer(resume, Device::cpu());
    ADD_FAILURE() << "a flipped byte inside the embedding was not found";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("does not match its checksum"), std::string::npos) << e.message();
  }
  fs::remove_all(dir);
}

TEST_F(DamagedCheckpoint, TruncatedShardFile) {
  fs::resize_file(shard_, fs::file_size(shard_) / 2);
  std::string message = load_error();
  EXPECT_NE(message.find(shard_.string()), std::string::npos) << message;
  EXPECT_NE(message.find("truncated or corrupt"), std::string::npos) << message;
}

TEST_F(DamagedCheckpoint, OverwrittenFileHeader) {
  overwrite(shard_, 0, 256);
  std::string message = load_error();
  EXPECT_NE(message.find(shard_.string()), std::string::npos) << message;
}

TEST_F(DamagedCheckpoint, EmptyShardFile) {
  fs::resize_file(shard_, 0);
  std::string message = load_error();
  EXPECT_NE(message.find(shard_.string()), std::string::npos) << message;
}

TEST_F(DamagedCheckpoint, MissingShardFile) {
  fs::remove(shard_);
  std::string message = load_error();
  EXPECT_NE(message.find(shard_.string()), std::string::npos) << message;
  EXPECT_NE(message.find("is missing"), std::string::npos) << message;
}

TEST_F(DamagedCheckpoint, MissingCommonFile) {
  fs::path common = dir_ / "iter_0000002" / ckpt::kCommonFile;
  fs::remove(common);
  std::string message = load_error();
  EXPECT_NE(message.find(ckpt::kCommonFile), std::string::npos) << message;
}

TEST_F(DamagedCheckpoint, TruncatedCommonFile) {
  fs::path common = dir_ / "iter_0000002" / ckpt::kCommonFile;
  fs::resize_file(common, fs::file_size(common) / 3);
  std::string message = load_error();
  EXPECT_NE(message.find(common.string()), std::string::npos) << message;
}

TEST_F(DamagedCheckpoint, AnotherHiddenSizeIsAConfigErrorNamingTheFile) {
  std::vector<std::string> extra = {"checkpoint.load=" + dir_.string(), "model.hidden_size=32"};
  try {
    train::Trainer trainer(config(4, extra), Device::cpu());
    FAIL() << "a checkpoint of hidden size 16 loaded into hidden size 32";
  } catch (const ConfigError& e) {
    std::string message = e.message();
    EXPECT_NE(message.find((dir_ / "iter_0000002" / ckpt::kCommonFile).string()), std::string::npos) << message;
    EXPECT_NE(message.find("hidden_size = 16"), std::string::npos) << message;
    EXPECT_NE(message.find("hidden_size = 32"), std::string::npos) << message;
  }
}

TEST_F(DamagedCheckpoint, ReaderReportsAShapeMismatchWithTheFile) {
  // Below the config check: a tensor of another shape names its file and the shapes.
  ckpt::CheckpointReader reader(dir_ / "iter_0000002");
  std::vector<float> storage(8 * 16, 0.0f);
  ckpt::TensorShard target{"decoder.layers.0.mlp.linear_fc1.weight", Tensor(storage.data(), DType::f32, {8, 16}),
                           {8, 16}, -1, 0};
  try {
    reader.read_model(target);
    FAIL() << "a [64, 16] tensor loaded into [8, 16]";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(shard_.string()), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace tessera
