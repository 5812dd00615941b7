#include "tessera/data/gpt_dataset_cache.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/rng.h"

namespace tessera::data {

namespace fs = std::filesystem;

namespace {

size_t descr_size(const std::string& descr) {
  if (descr == "<i2" || descr == "<u2") return 2;
  if (descr == "<i4" || descr == "<u4") return 4;
  if (descr == "<i8" || descr == "<u8") return 8;
  return 0;
}

std::string unique_temp(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string temp = unique_temp(path);
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) TESSERA_FAIL(temp, ": cannot create: ", std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      TESSERA_FAIL(temp, ": write failed");
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    TESSERA_FAIL(path, ": rename failed: ", ec.message());
  }
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TESSERA_CONFIG_FAIL(path, ": cannot open: ", std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const std::vector<int64_t>& values) {
  const size_t item = descr_size(descr);
  TESSERA_CHECK(item != 0, "write_npy: unsupported descr ", descr);
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += shape.size() == 1 ? ",), }" : "), }";
  // Header padded with spaces and a final newline so that data starts on a 64-byte boundary.
  size_t total = 10 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  uint16_t header_len = static_cast<uint16_t>(dict.size());
  bytes.append(reinterpret_cast<const char*>(&header_len), 2);
  bytes += dict;
  const size_t offset = bytes.size();
  bytes.resize(offset + values.size() * item);
  char* p = bytes.data() + offset;
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    if (item == 2) { uint16_t x = static_cast<uint16_t>(v); std::memcpy(p + 2 * i, &x, 2); }
    else if (item == 4) { uint32_t x = static_cast<uint32_t>(v); std::memcpy(p + 4 * i, &x, 4); }
    else std::memcpy(p + 8 * i, &v, 8);
  }
  write_file_atomically(path, bytes);
}

NpyArray read_npy(const std::string& path) {
  const std::string bytes = read_whole_file(path);
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0 || bytes[6] != 1)
    TESSERA_CONFIG_FAIL(path, ": not a numpy .npy file of format version 1");
  uint16_t header_len;
  std::memcpy(&header_len, bytes.data() + 8, 2);
  if (bytes.size() < 10u + header_len) TESSERA_CONFIG_FAIL(path, ": truncated .npy header");
  const std::string header = bytes.substr(10, header_len);
  NpyArray out;
  auto d = header.find("'descr': '");
  auto s = header.find("'shape': (");
  if (d == std::string::npos || s == std::string::npos || header.find("'fortran_order': False") == std::string::npos)
    TESSERA_CONFIG_FAIL(path, ": unsupported .npy header ", header);
  out.descr = header.substr(d + 10, header.find('\'', d + 10) - (d + 10));
  const size_t item = descr_size(out.descr);
  if (item == 0) TESSERA_CONFIG_FAIL(path, ": unsupported .npy dtype ", out.descr);
  size_t pos = s + 10;
  int64_t count = 1;
  while (pos < header.size() && header[pos] != ')') {
    if (header[pos] >= '0' && header[pos] <= '9') {
      int64_t v = 0;
      while (header[pos] >= '0' && header[pos] <= '9') v = v * 10 + (header[pos++] - '0');
      out.shape.push_back(v);
      count *= v;
    } else {
      ++pos;
    }
  }
  const size_t offset = 10u + header_len;
  if (bytes.size() != offset + static_cast<size_t>(count) * item)
    TESSERA_CONFIG_FAIL(path, ": .npy holds ", bytes.size() - offset, " data bytes, shape needs ", count * static_cast<int64_t>(item));
  out.values.resize(static_cast<size_t>(count));
  const char* p = bytes.data() + offset;
  for (size_t i = 0; i < out.values.size(); ++i) {
    if (out.descr == "<i2") { int16_t x; std::memcpy(&x, p + 2 * i, 2); out.values[i] = x; }
    else if (out.descr == "<u2") { uint16_t x; std::memcpy(&x, p + 2 * i, 2); out.values[i] = x; }
    else if (out.descr == "<i4") { int32_t x; std::memcpy(&x, p + 4 * i, 4); out.values[i] = x; }
    else if (out.descr == "<u4") { uint32_t x; std::memcpy(&x, p + 4 * i, 4); out.values[i] = x; }
    else { int64_t x; std::memcpy(&x, p + 8 * i, 8); out.values[i] = x; }
  }
  return out;
}

GPTIndexCache::GPTIndexCache(std::string dir, std::string description, const std::string& split_name)
    : dir_(std::move(dir)), description_(std::move(description)) {
  stem_ = (fs::path(dir_) / (hex64(stream_id(description_)) + "-GPTDataset-" + split_name)).string();
}

std::optional<GPTIndices> GPTIndexCache::load() const {
  std::error_code ec;
  const std::string desc_path = stem_ + "-description.txt";
  if (!fs::exists(desc_path, ec)) return std::nullopt;
  try {
    if (read_whole_file(desc_path) != description_) return std::nullopt;
    GPTIndices indices;
    NpyArray doc = read_npy(stem_ + "-document_index.npy");
    NpyArray sample = read_npy(stem_ + "-sample_index.npy");
    NpyArray shuffle = read_npy(stem_ + "-shuffle_index.npy");
    indices.document_index.assign(doc.values.begin(), doc.values.end());
    indices.sample_index = std::move(sample.values);
    indices.shuffle_index = std::move(shuffle.values);
    if (indices.sample_index.size() < 2 || indices.sample_index.size() % 2 != 0 ||
        static_cast<int64_t>(indices.shuffle_index.size()) != indices.num_samples())
      return std::nullopt;
    return indices;
  } catch (const Error& e) {
    log::warn("ignoring the index cache ", stem_, "-*: ", e.message());
    return std::nullopt;
  }
}

bool GPTIndexCache::save(const GPTIndices& indices) const {
  try {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) TESSERA_FAIL(dir_, ": cannot create the cache directory: ", ec.message());
    std::vector<int64_t> doc(indices.document_index.begin(), indices.document_index.end());
    write_npy(stem_ + "-document_index.npy", "<i4", {static_cast<int64_t>(doc.size())}, doc);
    int64_t max_value = static_cast<int64_t>(indices.document_index.size());
    for (int64_t v : indices.sample_index) max_value = std::max(max_value, v);
    write_npy(stem_ + "-sample_index.npy", max_value <= std::numeric_limits<int32_t>::max() ? "<i4" : "<i8",
              {indices.num_samples() + 1, 2}, indices.sample_index);
    const int64_t total = static_cast<int64_t>(indices.shuffle_index.size());
    write_npy(stem_ + "-shuffle_index.npy", total >= int64_t{0xffffffff} - 1 ? "<i8" : "<u4", {total},
              indices.shuffle_index);
    write_file_atomically(stem_ + "-description.txt", description_);
    return true;
  } catch (const Error& e) {
    log::warn("not caching the GPT dataset indices: ", e.message());
    return false;
  }
}

}  // namespace tessera::data
