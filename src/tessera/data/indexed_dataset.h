// Read-only view of a Megatron-LM indexed dataset (PREFIX.idx + PREFIX.bin, MMIDIDX version 1):
// both files are memory-mapped and validated on open; sequences and documents are read by index.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/data/indexed_dataset_dtype.h"

namespace tessera::data {

// The .idx layout (little-endian): 9-byte magic, u64 version = 1, u8 dtype code, u64 sequence
// count N, u64 document count D+1, int32 lengths[N], int64 byte pointers[N], int64
// document_indices[D+1] (0, end of doc 0, ..., N), optionally int8 modes[N] (multimodal).
inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexVersion = 1;
inline constexpr size_t kIndexHeaderBytes = 34;

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // ConfigError naming the path if it cannot be opened
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

class IndexedDataset {
 public:
  // Opens and validates PREFIX.idx / PREFIX.bin: magic, version, dtype code, sizes, document
  // indices (start at 0, sorted, end at N), pointers equal to the prefix sum of lengths, and the
  // .bin size. Any violation is a ConfigError naming the file and what is wrong.
  explicit IndexedDataset(const std::string& path_prefix);

  const std::string& path_prefix() const { return prefix_; }
  IndexDType dtype() const { return dtype_; }
  size_t item_size() const { return index_dtype_size(dtype_); }
  int64_t sequence_count() const { return sequence_count_; }
  int64_t document_count() const { return document_count_; }  // D (not D+1)
  int64_t total_tokens() const { return total_tokens_; }
  bool has_modes() const { return has_modes_; }

  int32_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;   // byte offset into .bin
  int64_t document_index(int64_t d) const;     // d in [0, D]: first sequence of document d
  int8_t sequence_mode(int64_t i) const;       // only if has_modes()

  // Copies `count` ids of sequence i starting at element `offset` into out (converted to int32).
  void read(int64_t sequence, int64_t offset, int64_t count, int32_t* out) const;
  std::vector<int64_t> sequence(int64_t i) const;
  std::vector<int64_t> document(int64_t d) const;  // its sequences concatenated

 private:
  std::string prefix_;
  MappedFile idx_;
  MappedFile bin_;
  IndexDType dtype_ = IndexDType::uint16;
  int64_t sequence_count_ = 0;
  int64_t document_count_ = 0;
  int64_t total_tokens_ = 0;
  size_t lengths_offset_ = 0, pointers_offset_ = 0, documents_offset_ = 0, modes_offset_ = 0;
  bool has_modes_ = false;
};

}  // namespace tessera::data
