// The shard groups' piece index (ckpt/piece_index.h): what the trainer's save records equals what
// the datasets say, the reader loads the same tensors with and without it, and an index that no
// longer matches its group (a replaced or added dataset, a damaged word, a stale data offset) is
// never trusted.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>

#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/ckpt/data_checksum.h"
#include "tessera/ckpt/h5_file.h"
#include "tessera/ckpt/piece_index.h"
#include "tessera/train/trainer.h"
#include "tiny_training.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

const char* const kGroups[] = {"model", "optimizer/exp_avg", "optimizer/exp_avg_sq"};

class PieceIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_piece_index_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    train::Trainer(test::tiny_training_config(2, {"checkpoint.save=" + dir_.string()}), Device::cpu()).train();
    folder_ = dir_ / "iter_0000002";
    shard_ = folder_ / "mp_rank_00_000.h5";
    ASSERT_TRUE(fs::exists(shard_));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every saved tensor, as the reader assembles it.
  std::map<std::string, std::vector<float>> load_all() const {
    ckpt::CheckpointReader reader(folder_);
    std::map<std::string, std::vector<float>> out;
    for (const auto& t : reader.tensors()) {
      Shape shape;
      out[t.kind + "/" + t.name] = reader.read_global(t.kind, t.name, shape);
    }
    return out;
  }

  // Calls edit(group id) on one group of the shard file opened for writing.
  template <typename Edit>
  void edit_group(const char* group, Edit edit) const {
    ckpt::H5Id file(H5Fopen(shard_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ASSERT_GE(file.get(), 0);
    ckpt::H5Id g = ckpt::h5_open_group(file.get(), group);
    edit(g.get());
  }

  bool index_matches(const char* group) const {
    ckpt::H5Id file = ckpt::h5_open_file_read(shard_.string());
    ckpt::H5Id g = ckpt::h5_open_group(file.get(), group);
    return ckpt::read_piece_index(g.get(), ckpt::h5_list_links(g.get())).has_value();
  }

  fs::path dir_, folder_, shard_;
};

TEST_F(PieceIndex, DescribesEveryDatasetAsItsOwnAttributesDo) {
  ckpt::H5Id file = ckpt::h5_open_file_read(shard_.string());
  for (const char* name : kGroups) {
    ckpt::H5Id group = ckpt::h5_open_group(file.get(), name);
    const std::vector<ckpt::H5Link> links = ckpt::h5_list_links(group.get());
    ASSERT_FALSE(links.empty()) << name;
    const auto indexed = ckpt::read_piece_index(group.get(), links);
    ASSERT_TRUE(indexed.has_value()) << name << " has no usable piece index";
    ASSERT_EQ(indexed->size(), links.size());
    int direct = 0;
    for (size_t i = 0; i < links.size(); ++i) {
      ckpt::H5Id dataset(H5Dopen2(group.get(), links[i].name.c_str(), H5P_DEFAULT));
      ASSERT_GE(dataset.get(), 0);
      const ckpt::StoredPiece want = ckpt::describe_stored_piece(dataset.get()), &got = (*indexed)[i];
      const std::string what = std::string(name) + "/" + links[i].name;
      EXPECT_EQ(got.dtype, want.dtype) << what;
      EXPECT_EQ(got.global_shape, want.global_shape) << what;
      EXPECT_EQ(got.local_shape, want.local_shape) << what;
      EXPECT_EQ(got.split_axis, want.split_axis) << what;
      EXPECT_EQ(got.split_offset, want.split_offset) << what;
      EXPECT_EQ(got.sliced, want.sliced) << what;
      EXPECT_EQ(got.flat_offset, want.flat_offset) << what;
      EXPECT_EQ(got.count, want.count) << what;
      EXPECT_EQ(got.stored_count, want.stored_count) << what;
      EXPECT_EQ(got.data_offset, want.data_offset) << what;
      EXPECT_EQ(got.checksum8, want.checksum8) << what;
      direct += got.data_offset >= 0 ? 1 : 0;
    }
    EXPECT_EQ(direct, static_cast<int>(links.size())) << name << ": every saved dataset is read by pread";
  }
}

TEST_F(PieceIndex, TheReaderLoadsTheSameWithoutIt) {
  const auto with_index = load_all();
  ASSERT_FALSE(with_index.empty());
  for (const char* group : kGroups)
    edit_group(group, [](hid_t g) { ASSERT_GE(H5Adelete(g, "piece_index"), 0); });
  for (const char* group : kGroups) EXPECT_FALSE(index_matches(group)) << group;
  EXPECT_EQ(load_all(), with_index);
}

TEST_F(PieceIndex, AReplacedOrAddedDatasetRetiresTheGroupsIndex) {
  std::string first;
  edit_group("model", [&](hid_t g) {
    first = ckpt::h5_list(g).front();
    ckpt::H5Id dataset(H5Dopen2(g, first.c_str(), H5P_DEFAULT));
    const Shape shape = ckpt::h5_dataset_shape(dataset.get());
    std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
    ckpt::h5_read_into(dataset.get(), DType::f32, values.data());
    dataset.reset();
    ASSERT_GE(H5Ldelete(g, first.c_str(), H5P_DEFAULT), 0);  // the same name, a new object
    ckpt::h5_write_tensor(g, first, Tensor(values.data(), DType::f32, shape));
  });
  EXPECT_FALSE(index_matches("model"));
  EXPECT_TRUE(index_matches("optimizer/exp_avg"));
  float extra[2] = {1, 2};
  edit_group("optimizer/exp_avg", [&](hid_t g) { ckpt::h5_write_tensor(g, "extra", Tensor(extra, DType::f32, {2})); });
  EXPECT_FALSE(index_matches("optimizer/exp_avg"));
}

TEST_F(PieceIndex, ADamagedWordRetiresIt) {
  for (size_t word : {size_t{0}, size_t{1}, size_t{5}, size_t{12}}) {
    edit_group("model", [&](hid_t g) {
      std::vector<int64_t> words = ckpt::h5_attr_ints(g, "piece_index");
      ASSERT_GT(words.size(), 13u);
      words[word] ^= 4;
      ASSERT_GE(H5Adelete(g, "piece_index"), 0);
      ckpt::h5_set_attr(g, "piece_index", words);
    });
    EXPECT_FALSE(index_matches("model")) << "word " << word;
    edit_group("model", [](hid_t g) { ckpt::write_piece_index(g); });
    EXPECT_TRUE(index_matches("model"));
  }
}

TEST_F(PieceIndex, WhileIntactItIsWhatTheReaderReadsNotTheDatasetsAttributes) {
  // The trade the index makes: an attribute edited in place under an intact index is not read (a
  // tool that edits attributes must delete or rewrite the index); the data checksums still hold.
  const auto want = load_all();
  edit_group("model", [](hid_t g) {
    ckpt::H5Id dataset(H5Dopen2(g, "embedding.word_embeddings.weight", H5P_DEFAULT));
    ASSERT_GE(dataset.get(), 0);
    ckpt::h5_set_attr(dataset.get(), "split_axis", int64_t{1});
    ckpt::h5_set_attr(dataset.get(), "split_offset", int64_t{-5});
  });
  EXPECT_TRUE(index_matches("model"));
  EXPECT_EQ(load_all(), want);
  edit_group("model", [](hid_t g) { ASSERT_GE(H5Adelete(g, "piece_index"), 0); });
  EXPECT_THROW(load_all(), Error);  // read from the dataset itself: split_axis 1 at offset -5
}

TEST_F(PieceIndex, AStaleDataOffsetFallsBackToReadingTheDataset) {
  const auto want = load_all();
  // The first piece's data offset (word 2 + 8, layout in piece_index.h) moved by 64 bytes, the
  // index's checksum recomputed: only the data's own checksum can tell.
  edit_group("model", [](hid_t g) {
    std::vector<int64_t> words = ckpt::h5_attr_ints(g, "piece_index");
    ASSERT_GE(words[10], 0);
    words[10] += 64;
    words.back() = static_cast<int64_t>(ckpt::data_checksum(words.data(), (words.size() - 1) * sizeof(int64_t)));
    ASSERT_GE(H5Adelete(g, "piece_index"), 0);
    ckpt::h5_set_attr(g, "piece_index", words);
  });
  ASSERT_TRUE(index_matches("model"));
  EXPECT_EQ(load_all(), want);
}

TEST(PieceIndexParts, AGroupOfManyDatasetsIsIndexedInSeveralAttributes) {
  // 700 tensors (a large model's shard holds as many): more words than one attribute of a file in
  // HDF5's earliest format may hold (64 KiB), so the index is split into parts; it reads back whole.
  const fs::path path = fs::temp_directory_path() / ("tessera_piece_parts_" + std::to_string(::getpid()) + ".h5");
  {
    ckpt::H5Id file = ckpt::h5_create_file(path.string());
    ckpt::H5Id group = ckpt::h5_create_group(file.get(), "model");
    float values[6] = {1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 700; ++i) {
      const std::string name = "decoder.layers." + std::to_string(i) + ".weight";
      ckpt::h5_write_tensor(group.get(), name, Tensor(values, DType::f32, {2, 3}));
      ckpt::H5Id dataset(H5Dopen2(group.get(), name.c_str(), H5P_DEFAULT));
      ckpt::h5_set_attr(dataset.get(), "global_shape", std::vector<int64_t>{4, 3});
      ckpt::h5_set_attr(dataset.get(), "local_shape", std::vector<int64_t>{2, 3});
      ckpt::h5_set_attr(dataset.get(), "split_axis", int64_t{0});
      ckpt::h5_set_attr(dataset.get(), "split_offset", int64_t{i % 2 * 2});
    }
    ckpt::write_piece_index(group.get());
    EXPECT_TRUE(ckpt::h5_has_attr(group.get(), "piece_index_1"));
  }
  ckpt::H5Id file = ckpt::h5_open_file_read(path.string());
  ckpt::H5Id group = ckpt::h5_open_group(file.get(), "model");
  const std::vector<ckpt::H5Link> links = ckpt::h5_list_links(group.get());
  const auto indexed = ckpt::read_piece_index(group.get(), links);
  ASSERT_TRUE(indexed.has_value());
  ASSERT_EQ(indexed->size(), 700u);
  for (size_t i = 0; i < links.size(); ++i) {
    ckpt::H5Id dataset(H5Dopen2(group.get(), links[i].name.c_str(), H5P_DEFAULT));
    const ckpt::StoredPiece want = ckpt::describe_stored_piece(dataset.get());
    EXPECT_EQ((*indexed)[i].split_offset, want.split_offset) << links[i].name;
    EXPECT_EQ((*indexed)[i].data_offset, want.data_offset) << links[i].name;
    EXPECT_EQ((*indexed)[i].checksum8, want.checksum8) << links[i].name;
  }
  file.reset();
  fs::remove(path);
}

}  // namespace
}  // namespace tessera
