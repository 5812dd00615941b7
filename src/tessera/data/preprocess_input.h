// The input of tessera-preprocess: a JSONL file (memory-mapped) or .jsonl.gz (inflated into
// memory), and the byte range of it that one MPI rank encodes (aligned to line starts).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "tessera/data/indexed_dataset.h"

namespace tessera::data {

class PreprocessInput {
 public:
  // ConfigError naming the path if it cannot be read or is not valid gzip (names ending in .gz).
  explicit PreprocessInput(const std::string& path);
  const std::string& path() const { return path_; }
  std::string_view text() const {
    return from_gzip_ ? std::string_view(inflated_)
                      : std::string_view(reinterpret_cast<const char*>(mapped_.data()), mapped_.size());
  }

 private:
  std::string path_;
  MappedFile mapped_;
  std::string inflated_;
  bool from_gzip_ = false;
};

// First byte of the line that holds byte `position` if it starts there, else of the next line:
// 0 for 0, text.size() past the last line.
size_t align_to_line_start(std::string_view text, size_t position);
// Rank r of n takes [align(size*r/n), align(size*(r+1)/n)): consecutive ranks share their bounds,
// so every line goes to exactly one rank, in rank order.
std::pair<size_t, size_t> rank_byte_range(std::string_view text, int rank, int world_size);
// 1-based number of the line that starts at `position` (counts '\n' before it).
int64_t line_number_at(std::string_view text, size_t position);

}  // namespace tessera::data
