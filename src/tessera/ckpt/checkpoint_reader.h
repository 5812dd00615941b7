// Reading a checkpoint folder written under any TP / PP / DP layout: indexes every shard file's
// self-describing datasets and reads the slice a rank asks for in its own layout (resharding by
// slices: only the saved shards that overlap it, straight into the destination).
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint_state.h"
#include "tessera/ckpt/h5_file.h"

namespace tessera::ckpt {

class CheckpointReader {
 public:
  // Opens common.h5 and every *.h5 file. A missing shard file of the saved layout, or a file HDF5
  // cannot open or index (truncated, overwritten), is an Error naming the file.
  explicit CheckpointReader(const std::filesystem::path& folder);
  ~CheckpointReader();

  const std::filesystem::path& folder() const { return folder_; }
  int64_t iteration() const { return iteration_; }
  TrainingProgress progress() const { return progress_; }
  const ShardCoordinates& saved_layout() const { return saved_layout_; }  // tp/pp/ep/dp sizes of the writer
  bool has_optimizer() const { return has_optimizer_; }
  // step, loss scale, ... (no slices).
  OptimizerState optimizer_scalars() const { return optimizer_scalars_; }
  std::map<std::string, double> scheduler() const;
  std::map<std::string, std::string> scheduler_names() const;
  std::string config_toml() const;
  // common.h5 /model_info: vocab_size, padded_vocab_size, num_layers, hidden_size, num_attention_heads, ...
  std::map<std::string, int64_t> model_info() const;

  // Model tensors: "param" (the model's values), optimizer state: "exp_avg", "exp_avg_sq", "main_param".
  bool has(const std::string& kind, const std::string& name) const;

  // Fills target.local (f32, bf16, f16 or f64) with its slice of the saved global tensor `name`
  // (target.name, or source_name when given: e.g. output_layer.weight from the word embeddings).
  // Uses the fp32 main parameter when the checkpoint has one. The global shapes must match, except
  // the vocabulary (padded) rows of tensors with target.vocab_axis = 0 (embedding / output tables),
  // which are copied up to the smaller size and zero-filled beyond.
  void read_model(const TensorShard& target, const std::string& source_name = "") const;

  // Fills out (f32 [slice.count]) with optimizer state `kind` of the slice's elements.
  void read_optimizer(const std::string& kind, const OptimizerSlice& slice, const Tensor& out,
                      const std::string& source_name = "") const;

  // Slice-wise loading (checkpoint_reader_slices.cpp): reads only the saved shards that overlap the
  // target's local shard, straight into `out` (elements [flat_offset, flat_offset + count) of the
  // target's local shard, any floating dtype, host memory), converting dtypes block by block; a
  // saved piece holding exactly those elements in out's dtype is read directly into out.
  void read_slices(const std::string& kind, const std::string& name, const TensorShard& target, int64_t flat_offset,
                   int64_t count, void* out, DType out_dtype) const;

  // For converters (checkpoint_reader_global.cpp): every indexed (kind, name) with its saved layout,
  // and a whole saved global tensor as f32.
  struct TensorEntry {
    std::string kind, name;
    Shape global_shape;
    int split_axis = -1;
    DType dtype = DType::f32;
    int shards = 0;                  // distinct split offsets
    std::vector<std::string> files;  // files holding a piece
  };
  std::vector<TensorEntry> tensors() const;
  std::vector<float> read_global(const std::string& kind, const std::string& name, Shape& global_shape) const;

 private:
  struct Piece {
    size_t file = 0;
    std::string path;  // dataset path in the file
    Shape global_shape, local_shape;
    int split_axis = -1;
    int64_t split_offset = 0, flat_offset = 0, count = 0;
    DType dtype = DType::f32;
    // Looked up once by the index: the file offset of the dataset's bytes when pread can read them as
    // they are (contiguous, native type; -1 otherwise) and their "checksum8", so that a read makes no
    // HDF5 call.
    int64_t data_offset = -1;
    uint64_t checksum8 = 0;
    bool indexed = false;  // described by the group's piece index (piece_index.h), not by the dataset
  };
  void read_common(const std::filesystem::path& common);
  // The shard files the saved layout (tp/pp/ep sizes, distributed optimizer over dp) must have.
  std::vector<std::string> expected_files() const;
  void index_file(size_t file_index, const std::string& file_name);
  void index_group(size_t file_index, hid_t group, const std::string& path, const std::string& kind);
  // Error unless the stored pieces of (kind, name) make up every saved shard and the shards its
  // whole saved global shape (the shapes are attributes: checked before allocating by them).
  void check_stored_data_backs(const std::string& kind, const std::string& name, const std::vector<Piece>& pieces) const;
  // Reads one piece (its whole dataset) into dst (the piece's dtype) and verifies its checksum.
  void read_piece(const Piece& piece, void* dst) const;
  // Reused read buffers of read_slices (saved shard bytes, assembled target shard): fresh large
  // allocations per tensor cost page faults; they live as long as the reader.
  mutable std::vector<char> staging_, assembled_;
  std::filesystem::path folder_;
  std::vector<std::unique_ptr<H5Id>> files_;
  std::vector<int> descriptors_;  // files_' POSIX descriptors (HDF5's sec2 driver), for direct reads
  std::vector<std::string> file_names_;
  std::map<std::pair<std::string, std::string>, std::vector<Piece>> pieces_;  // (kind, name) -> pieces
  H5Id common_;
  int64_t iteration_ = 0;
  TrainingProgress progress_;
  ShardCoordinates saved_layout_;
  bool has_optimizer_ = false;
  OptimizerState optimizer_scalars_;
};

}  // namespace tessera::ckpt
