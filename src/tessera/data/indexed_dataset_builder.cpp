#include "tessera/data/indexed_dataset_builder.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/data/indexed_dataset.h"

namespace tessera::data {

namespace {
std::FILE* open_for_write(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) TESSERA_CONFIG_FAIL(path, ": cannot create: ", std::strerror(errno));
  return f;
}
void checked_write(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes && std::fwrite(data, 1, bytes, f) != bytes) TESSERA_FAIL(path, ": write failed: ", std::strerror(errno));
}
template <typename T>
void put(std::vector<unsigned char>& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}
}  // namespace

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& bin_path, IndexDType dtype)
    : bin_path_(bin_path), dtype_(dtype) {
  bin_ = open_for_write(bin_path_);
  std::setvbuf(bin_, nullptr, _IOFBF, 1 << 20);
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (bin_) std::fclose(bin_);
}

void IndexedDatasetBuilder::write_bin(const void* data, size_t bytes) {
  TESSERA_CHECK(bin_ != nullptr, bin_path_, ": builder already finalized");
  checked_write(bin_, data, bytes, bin_path_);
}

void IndexedDatasetBuilder::add_item(std::span<const int32_t> tokens) {
  const size_t item = index_dtype_size(dtype_);
  if (dtype_ == IndexDType::int32) {
    write_bin(tokens.data(), tokens.size() * 4);
  } else {
    scratch_.resize(tokens.size() * item);
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (!index_value_fits(dtype_, tokens[k]))
        TESSERA_CONFIG_FAIL(bin_path_, ": token id ", tokens[k], " does not fit the dataset dtype ",
                            index_dtype_name(dtype_), " (use a wider dtype for this vocabulary)");
      store_index_element(dtype_, scratch_.data(), k, tokens[k]);
    }
    write_bin(scratch_.data(), scratch_.size());
  }
  TESSERA_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX), "sequence of ", tokens.size(),
                " tokens exceeds the int32 length field of the .idx");
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens, std::span<const int64_t> lengths) {
  size_t offset = 0;
  for (int64_t len : lengths) {
    TESSERA_CHECK(len >= 0 && offset + static_cast<size_t>(len) <= tokens.size(), "add_document: lengths sum past ",
                  tokens.size(), " tokens");
    add_item(tokens.subspan(offset, static_cast<size_t>(len)));
    offset += static_cast<size_t>(len);
  }
  TESSERA_CHECK(offset == tokens.size(), "add_document: lengths sum to ", offset, " but ", tokens.size(),
                " tokens were given");
  end_document();
}

void IndexedDatasetBuilder::end_document() { document_indices_.push_back(static_cast<int64_t>(lengths_.size())); }

void IndexedDatasetBuilder::add_index(const std::string& path_prefix) {
  IndexedDataset other(path_prefix);
  if (other.dtype() != dtype_)
    TESSERA_CONFIG_FAIL(path_prefix, ".idx: dtype ", index_dtype_name(other.dtype()), " differs from the ",
                        index_dtype_name(dtype_), " of the dataset being built (", bin_path_, ")");
  const int64_t base = static_cast<int64_t>(lengths_.size());
  for (int64_t i = 0; i < other.sequence_count(); ++i) lengths_.push_back(other.sequence_length(i));
  for (int64_t d = 1; d <= other.document_count(); ++d) document_indices_.push_back(base + other.document_index(d));
  MappedFile bin(path_prefix + ".bin");
  write_bin(bin.data(), bin.size());
}

void write_index_file(const std::string& idx_path, IndexDType dtype, std::span<const int32_t> lengths,
                      std::span<const int64_t> document_indices) {
  std::vector<unsigned char> header;
  header.insert(header.end(), kIndexMagic, kIndexMagic + sizeof(kIndexMagic));
  put<uint64_t>(header, kIndexVersion);
  put<uint8_t>(header, static_cast<uint8_t>(dtype));
  put<uint64_t>(header, lengths.size());
  put<uint64_t>(header, document_indices.size());
  std::FILE* f = open_for_write(idx_path);
  try {
    checked_write(f, header.data(), header.size(), idx_path);
    checked_write(f, lengths.data(), lengths.size() * 4, idx_path);
    std::vector<int64_t> pointers(lengths.size());
    const int64_t item = static_cast<int64_t>(index_dtype_size(dtype));
    int64_t address = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      pointers[i] = address;
      address += static_cast<int64_t>(lengths[i]) * item;
    }
    checked_write(f, pointers.data(), pointers.size() * 8, idx_path);
    checked_write(f, document_indices.data(), document_indices.size() * 8, idx_path);
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0) TESSERA_FAIL(idx_path, ": close failed: ", std::strerror(errno));
}

void IndexedDatasetBuilder::finalize(const std::string& idx_path) {
  TESSERA_CHECK(bin_ != nullptr, bin_path_, ": builder already finalized");
  std::FILE* f = bin_;
  bin_ = nullptr;
  if (std::fclose(f) != 0) TESSERA_FAIL(bin_path_, ": close failed: ", std::strerror(errno));
  write_index_file(idx_path, dtype_, lengths_, document_indices_);
}

void merge_indexed_datasets(const std::vector<std::string>& input_prefixes, const std::string& output_prefix) {
  if (input_prefixes.empty()) TESSERA_CONFIG_FAIL("merge: no input datasets given");
  namespace fs = std::filesystem;
  const fs::path out(output_prefix);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::string hidden(1, '.');
  hidden += out.filename().string();
  hidden += ".merge-tmp";
  const std::string temp = (dir / hidden).string();
  try {
    IndexedDataset first(input_prefixes.front());
    IndexedDatasetBuilder builder(temp + ".bin", first.dtype());
    for (const auto& prefix : input_prefixes) builder.add_index(prefix);
    builder.finalize(temp + ".idx");
    fs::rename(temp + ".bin", output_prefix + ".bin");
    fs::rename(temp + ".idx", output_prefix + ".idx");
  } catch (...) {
    std::error_code ignored;
    fs::remove(temp + ".bin", ignored);
    fs::remove(temp + ".idx", ignored);
    throw;
  }
}

}  // namespace tessera::data
