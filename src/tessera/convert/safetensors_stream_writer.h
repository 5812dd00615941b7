// Writing one .safetensors file tensor by tensor (bounded memory): the header is computed from the
// names, dtypes and shapes up front (the reference writer's layout: descending element size, then
// name; header padded to 8 bytes), the data follows in that order, into PATH.tmp-<pid>, renamed to
// PATH by finish(). An unfinished writer removes its temporary file.
#pragma once
#include <cstdio>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::convert {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16"
  Shape shape;
};

// Bytes per element of a safetensors dtype this writer supports (F32, BF16, F16).
size_t safetensors_entry_bytes(const SafetensorsEntry& e);

class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(const std::filesystem::path& path, std::vector<SafetensorsEntry> entries,
                          const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  const std::vector<SafetensorsEntry>& order() const { return entries_; }  // write() must follow it
  void write(const std::string& name, std::span<const std::byte> bytes);
  void finish();

 private:
  std::filesystem::path path_, tmp_;
  std::vector<SafetensorsEntry> entries_;
  size_t next_ = 0;
  std::FILE* file_ = nullptr;
};

}  // namespace tessera::convert
