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
  std::vector<double> values = assemble(kind, name, global_shape);
  return std::vector<float>(values.begin(), values.end());
}

}  // namespace tessera::ckpt
