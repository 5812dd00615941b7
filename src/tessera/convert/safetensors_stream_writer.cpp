#include "tessera/convert/safetensors_stream_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera::convert {

namespace fs = std::filesystem;

size_t safetensors_entry_bytes(const SafetensorsEntry& e) {
  if (e.dtype == "F32") return 4;
  if (e.dtype == "BF16" || e.dtype == "F16") return 2;
  TESSERA_FAIL("safetensors writer: dtype ", e.dtype, " of tensor ", e.name, " is not supported (F32, BF16, F16)");
}

SafetensorsStreamWriter::SafetensorsStreamWriter(const fs::path& path, std::vector<SafetensorsEntry> entries,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_(path.string() + ".tmp-" + std::to_string(::getpid())), entries_(std::move(entries)) {
  std::stable_sort(entries_.begin(), entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    const size_t sa = safetensors_entry_bytes(a), sb = safetensors_entry_bytes(b);
    return sa != sb ? sa > sb : a.name < b.name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries_) {
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(e.shape)) * safetensors_entry_bytes(e);
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (!file_) TESSERA_FAIL(tmp_.string(), ": cannot create: ", std::strerror(errno));
  const uint64_t n = text.size();
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));
  if (std::fwrite(length, 1, 8, file_) != 8 || std::fwrite(text.data(), 1, text.size(), file_) != text.size())
    TESSERA_FAIL(tmp_.string(), ": write failed: ", std::strerror(errno));
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (!file_) return;
  std::fclose(file_);
  std::error_code ec;
  fs::remove(tmp_, ec);
}

void SafetensorsStreamWriter::write(const std::string& name, std::span<const std::byte> bytes) {
  TESSERA_CHECK(next_ < entries_.size() && entries_[next_].name == name, tmp_.string(), ": tensor '", name,
                "' written out of order (expected '", next_ < entries_.size() ? entries_[next_].name : "", "')");
  const SafetensorsEntry& e = entries_[next_];
  const size_t expected = static_cast<size_t>(shape_numel(e.shape)) * safetensors_entry_bytes(e);
  TESSERA_CHECK(bytes.size() == expected, tmp_.string(), ": tensor '", name, "' has ", bytes.size(), " bytes, needs ",
                expected);
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    TESSERA_FAIL(tmp_.string(), ": write failed: ", std::strerror(errno));
  ++next_;
}

void SafetensorsStreamWriter::finish() {
  TESSERA_CHECK(next_ == entries_.size(), tmp_.string(), ": ", entries_.size() - next_, " tensors were not written");
  const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const int close = std::fclose(file_);
  file_ = nullptr;
  if (!ok || close != 0) {
    std::error_code ec;
    fs::remove(tmp_, ec);
    TESSERA_FAIL(tmp_.string(), ": flushing failed: ", std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp_, path_, ec);
  TESSERA_CHECK(!ec, "renaming ", tmp_.string(), " to ", path_.string(), ": ", ec.message());
}

}  // namespace tessera::convert
