// CheckpointReader's converter-facing views: the index of every saved tensor and whole global tensors.
#include <set>

#include "tessera/ckpt/checkpoint_reader.h"

namespace tessera::ckpt {

std::vector<CheckpointReader::TensorEntry> CheckpointReader::tensors() const {
  std::vector<TensorEntry> out;
  for (const auto& [key, pieces] : pieces_) {
    TensorEntry e;
    e.kind = key.first;
    e.name = key.second;
    e.global_shape = pieces.front().global_shape;
    e.split_axis = pieces.front().split_axis;
    e.dtype = pieces.front().dtype;
    std::set<int64_t> offsets;
    std::set<std::string> files;
    for (const Piece& p : pieces) {
      offsets.insert(p.split_offset);
      files.insert(file_names_[p.file]);
    }
    e.shards = static_cast<int>(offsets.size());
    e.files.assign(files.begin(), files.end());
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<float> CheckpointReader::read_global(const std::string& kind, const std::string& name,
                                                 Shape& global_shape) const {
  auto it = pieces_.find({kind, name});
  TESSERA_CHECK(it != pieces_.end(), "checkpoint ", folder_.string(), " has no ", kind, " for tensor '", name, "'");
  for (const Piece& p : it->second)
    TESSERA_CHECK(p.global_shape == it->second.front().global_shape && p.split_axis == it->second.front().split_axis,
                  "checkpoint ", folder_.string(), ": ", kind, " '", name, "' has inconsistent layouts across files");
  check_stored_data_backs(kind, name, it->second);  // before allocating by the saved shape
  global_shape = it->second.front().global_shape;
  std::vector<float> values(static_cast<size_t>(shape_numel(global_shape)));
  TensorShard whole{name, Tensor(values.data(), DType::f32, global_shape), global_shape, -1, 0};
  read_slices(kind, name, whole, 0, whole.local.numel(), values.data(), DType::f32);
  return values;
}

}  // namespace tessera::ckpt
