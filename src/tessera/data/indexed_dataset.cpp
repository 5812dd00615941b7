#include "tessera/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::data {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) TESSERA_CONFIG_FAIL(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    TESSERA_CONFIG_FAIL(path, ": cannot stat: ", std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      TESSERA_FAIL(path, ": mmap of ", size_, " bytes failed: ", std::strerror(err));
    }
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

namespace {
template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
}  // namespace

IndexedDataset::IndexedDataset(const std::string& path_prefix) : prefix_(path_prefix) {
  const std::string idx_path = prefix_ + ".idx", bin_path = prefix_ + ".bin";
  idx_ = MappedFile(idx_path);
  const unsigned char* p = idx_.data();
  const size_t n = idx_.size();
  if (n < kIndexHeaderBytes)
    TESSERA_CONFIG_FAIL(idx_path, ": ", n, " bytes, shorter than the ", kIndexHeaderBytes,
                        "-byte MMIDIDX header (truncated or not an index file)");
  if (std::memcmp(p, kIndexMagic, sizeof(kIndexMagic)) != 0)
    TESSERA_CONFIG_FAIL(idx_path, ": bad magic (expected \"MMIDIDX\\x00\\x00\"): not a Megatron indexed dataset index");
  uint64_t version = load<uint64_t>(p + 9);
  if (version != kIndexVersion)
    TESSERA_CONFIG_FAIL(idx_path, ": index version ", version, ", only version ", kIndexVersion, " is supported");
  dtype_ = index_dtype_from_code(p[17], idx_path);
  uint64_t nseq = load<uint64_t>(p + 18), ndoc = load<uint64_t>(p + 26);
  if (ndoc < 1) TESSERA_CONFIG_FAIL(idx_path, ": document count field is 0 (must include the leading 0 entry)");
  // 12 bytes per sequence + 8 per document entry must fit in the file (guards against overflow too).
  if (nseq > n / 12 || ndoc > n / 8 || kIndexHeaderBytes + 12 * nseq + 8 * ndoc > n)
    TESSERA_CONFIG_FAIL(idx_path, ": truncated: header announces ", nseq, " sequences and ", ndoc,
                        " document entries but the file has only ", n, " bytes");
  sequence_count_ = static_cast<int64_t>(nseq);
  document_count_ = static_cast<int64_t>(ndoc) - 1;
  lengths_offset_ = kIndexHeaderBytes;
  pointers_offset_ = lengths_offset_ + 4 * nseq;
  documents_offset_ = pointers_offset_ + 8 * nseq;
  modes_offset_ = documents_offset_ + 8 * ndoc;
  size_t trailing = n - modes_offset_;
  if (trailing == nseq && nseq > 0) has_modes_ = true;
  else if (trailing != 0)
    TESSERA_CONFIG_FAIL(idx_path, ": ", trailing, " unexpected bytes after the document indices (expected 0, or ",
                        nseq, " sequence modes)");

  if (document_index(0) != 0) TESSERA_CONFIG_FAIL(idx_path, ": document_indices[0] is ", document_index(0), ", must be 0");
  for (int64_t d = 0; d < document_count_; ++d)
    if (document_index(d + 1) < document_index(d))
      TESSERA_CONFIG_FAIL(idx_path, ": document_indices not sorted at entry ", d + 1, " (", document_index(d + 1),
                          " < ", document_index(d), ")");
  if (document_index(document_count_) != sequence_count_)
    TESSERA_CONFIG_FAIL(idx_path, ": last document index is ", document_index(document_count_),
                        " but there are ", sequence_count_, " sequences");
  const int64_t item = static_cast<int64_t>(item_size());
  int64_t expect = 0;
  for (int64_t i = 0; i < sequence_count_; ++i) {
    int32_t len = sequence_length(i);
    if (len < 0) TESSERA_CONFIG_FAIL(idx_path, ": sequence ", i, " has negative length ", len);
    if (sequence_pointer(i) != expect)
      TESSERA_CONFIG_FAIL(idx_path, ": pointer mismatch: sequence ", i, " points to byte ", sequence_pointer(i),
                          ", expected ", expect, " (the prefix sum of the lengths times ", item, " bytes)");
    expect += len * item;
    total_tokens_ += len;
  }
  bin_ = MappedFile(bin_path);
  if (static_cast<int64_t>(bin_.size()) != expect)
    TESSERA_CONFIG_FAIL(bin_path, ": ", bin_.size(), " bytes, but ", idx_path, " describes ", expect, " bytes (",
                        total_tokens_, " ", index_dtype_name(dtype_), " tokens)",
                        static_cast<int64_t>(bin_.size()) < expect ? ": the .bin is truncated" : "");
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  return load<int32_t>(idx_.data() + lengths_offset_ + 4 * static_cast<size_t>(i));
}
int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  return load<int64_t>(idx_.data() + pointers_offset_ + 8 * static_cast<size_t>(i));
}
int64_t IndexedDataset::document_index(int64_t d) const {
  return load<int64_t>(idx_.data() + documents_offset_ + 8 * static_cast<size_t>(d));
}
int8_t IndexedDataset::sequence_mode(int64_t i) const {
  TESSERA_CHECK(has_modes_, prefix_, ".idx has no sequence modes");
  return load<int8_t>(idx_.data() + modes_offset_ + static_cast<size_t>(i));
}

void IndexedDataset::read(int64_t sequence, int64_t offset, int64_t count, int32_t* out) const {
  TESSERA_CHECK(sequence >= 0 && sequence < sequence_count_, "sequence ", sequence, " out of range [0, ",
                sequence_count_, ") in ", prefix_);
  TESSERA_CHECK(offset >= 0 && count >= 0 && offset + count <= sequence_length(sequence), "range [", offset, ", ",
                offset + count, ") outside sequence ", sequence, " of length ", sequence_length(sequence), " in ",
                prefix_);
  const unsigned char* base = bin_.data() + sequence_pointer(sequence);
  const size_t first = static_cast<size_t>(offset);
  if (dtype_ == IndexDType::int32) {
    std::memcpy(out, base + 4 * first, 4 * static_cast<size_t>(count));
    return;
  }
  if (dtype_ == IndexDType::uint16) {
    for (int64_t k = 0; k < count; ++k) out[k] = load<uint16_t>(base + 2 * (first + static_cast<size_t>(k)));
    return;
  }
  for (int64_t k = 0; k < count; ++k)
    out[k] = static_cast<int32_t>(load_index_element(dtype_, base, first + static_cast<size_t>(k)));
}

std::vector<int64_t> IndexedDataset::sequence(int64_t i) const {
  TESSERA_CHECK(i >= 0 && i < sequence_count_, "sequence ", i, " out of range [0, ", sequence_count_, ") in ", prefix_);
  std::vector<int64_t> out(static_cast<size_t>(sequence_length(i)));
  const unsigned char* base = bin_.data() + sequence_pointer(i);
  for (size_t k = 0; k < out.size(); ++k) out[k] = load_index_element(dtype_, base, k);
  return out;
}

std::vector<int64_t> IndexedDataset::document(int64_t d) const {
  TESSERA_CHECK(d >= 0 && d < document_count_, "document ", d, " out of range [0, ", document_count_, ") in ", prefix_);
  std::vector<int64_t> out;
  for (int64_t s = document_index(d); s < document_index(d + 1); ++s) {
    auto seq = sequence(s);
    out.insert(out.end(), seq.begin(), seq.end());
  }
  return out;
}

}  // namespace tessera::data
