// Index cache files of GPTDataset, laid out as Megatron's: {hash}-GPTDataset-{split}-
// {description.txt,document_index.npy,sample_index.npy,shuffle_index.npy}, numpy .npy (v1.0) arrays.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/data/gpt_dataset_indices.h"

namespace tessera::data {

// A numpy .npy file (format 1.0, little-endian, C order) of integers.
struct NpyArray {
  std::string descr;           // "<i4" | "<i8" | "<u4" | "<u8" | "<i2" | "<u2"
  std::vector<int64_t> shape;
  std::vector<int64_t> values;  // converted to int64
};
// Writes atomically (temporary name, then rename). `descr` chooses the element type on disk.
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const std::vector<int64_t>& values);
// ConfigError naming the path if it is not an .npy of integers this reader knows.
NpyArray read_npy(const std::string& path);

class GPTIndexCache {
 public:
  // `stem` is "<dir>/<hash>-GPTDataset-<split>" where hash is a 64-bit FNV-1a of the description.
  GPTIndexCache(std::string dir, std::string description, const std::string& split_name);
  const std::string& stem() const { return stem_; }
  // The cached indices if every file exists and the stored description equals ours.
  std::optional<GPTIndices> load() const;
  // Writes every file (atomically each, description last). Returns false (with a warning) if
  // the directory cannot be created or written, so read-only data still trains.
  bool save(const GPTIndices& indices) const;

 private:
  std::string dir_;
  std::string description_;
  std::string stem_;
};

}  // namespace tessera::data
