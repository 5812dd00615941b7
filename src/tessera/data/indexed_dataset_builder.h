// Writer of Megatron-LM indexed datasets (.bin streamed while adding, .idx written at finalize),
// appending whole datasets (add_index), and merge_indexed_datasets (tools/merge_datasets.py).
#pragma once
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "tessera/data/indexed_dataset_dtype.h"

namespace tessera::data {

class IndexedDatasetBuilder {
 public:
  // Creates (truncates) bin_path. The .idx is only written by finalize().
  IndexedDatasetBuilder(const std::string& bin_path, IndexDType dtype);
  ~IndexedDatasetBuilder();
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  IndexDType dtype() const { return dtype_; }
  int64_t sequence_count() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t document_count() const { return static_cast<int64_t>(document_indices_.size()) - 1; }

  // Appends one sequence (not ending a document). Ids must fit the dtype.
  void add_item(std::span<const int32_t> tokens);
  // Appends the sequences of one document (tokens concatenated, `lengths` per sequence, sum equal
  // to tokens.size()) and ends the document. Empty lengths make an empty document.
  void add_document(std::span<const int32_t> tokens, std::span<const int64_t> lengths);
  void end_document();
  // Appends every sequence and document of the dataset PREFIX (same dtype required).
  void add_index(const std::string& path_prefix);
  // Flushes and closes the .bin and writes the .idx (pointers recomputed from the lengths).
  void finalize(const std::string& idx_path);

 private:
  void write_bin(const void* data, size_t bytes);
  std::string bin_path_;
  IndexDType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_indices_{0};
  std::vector<unsigned char> scratch_;
};

// Concatenates the datasets in order into OUTPUT.bin/.idx (all must share one dtype). The output
// is written under temporary names and renamed at the end, so a failure leaves no OUTPUT files.
void merge_indexed_datasets(const std::vector<std::string>& input_prefixes, const std::string& output_prefix);

// Writes the .idx of a dataset from its parts (used by the builder; exposed for tests/tools).
void write_index_file(const std::string& idx_path, IndexDType dtype, std::span<const int32_t> lengths,
                      std::span<const int64_t> document_indices);

}  // namespace tessera::data
