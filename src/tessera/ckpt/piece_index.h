#pragma once
// What CheckpointReader needs of each stored tensor piece (a dataset of model/ or optimizer/<kind>/
// in a shard file), read from the dataset and its attributes (describe_stored_piece), or from the
// group's piece index: int64 attributes the trainer's save and tessera-convert write on each such
// group, describing all of its datasets. Opening a checkpoint then reads one attribute per group
// instead of opening every dataset and reading its eight attributes (about 38 us each: 16.7 of the
// ~130 ms load of a GPT-2 124M checkpoint with its AdamW state, 1.4 ms with the index).
//
// The index is a cache of the datasets' own attributes, trusted only while it matches the group: it
// records each dataset's object address, and read_piece_index gives nothing (the reader then
// describes every dataset) unless the group's links point at exactly the recorded objects and the
// index's own checksum holds. A tool that edits a dataset's attributes in place must delete the
// group's "piece_index"; a replaced dataset is a new object, so it is noticed. A read through a
// stale offset fails its checksum: CheckpointReader then reads the dataset through HDF5 again.
//
// Layout: int64 words in parts of at most 4096, attributes "piece_index", "piece_index_1", ... (an
// attribute of a file in HDF5's earliest format must fit one 64 KiB header message). The words:
// version (1), the number of pieces, then per piece: object address, dtype (its index in
// kStoredDtypes, h5_file.h), stored element count, split_axis, split_offset, sliced (0/1),
// flat_offset, count, data_offset (-1: read through HDF5), checksum8 (as its bits), the global shape
// (rank, dims), the local shape (rank, dims); last, data_checksum of every word before it.
#include <optional>
#include <string>
#include <vector>

#include "tessera/ckpt/h5_file.h"

namespace tessera::ckpt {

struct StoredPiece {
  DType dtype = DType::f32;
  Shape global_shape, local_shape;
  int64_t split_axis = -1, split_offset = 0;
  bool sliced = false;  // a distributed-optimizer slice (flat_offset and count attributes)
  int64_t flat_offset = 0, count = 0;  // (0 unless sliced: the reader counts local_shape once it is checked)
  int64_t stored_count = 0;  // elements in the dataset's dataspace
  // Where pread can read the bytes as they are (h5_direct_offset) and their "checksum8"; -1: read
  // through HDF5 (no checksum8, or another layout).
  int64_t data_offset = -1;
  uint64_t checksum8 = 0;
};

// From the dataset itself: its dataspace, dtype, layout attributes and direct-read offset.
StoredPiece describe_stored_piece(hid_t dataset);

// Writes (replaces) the group's "piece_index" describing every dataset in it. Call after the last
// dataset and its attributes are written.
void write_piece_index(hid_t group);

// The pieces of links (h5_list_links of the group), in their order, from the group's index; nullopt
// when the group has none, or it does not describe exactly these objects, or it is damaged.
std::optional<std::vector<StoredPiece>> read_piece_index(hid_t group, const std::vector<H5Link>& links);

}  // namespace tessera::ckpt
