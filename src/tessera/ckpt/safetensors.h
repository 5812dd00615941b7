// Hugging Face safetensors: a bounds-checked reader (one file, memory-mapped), a checkpoint view
// over a directory (model.safetensors or model.safetensors.index.json shards), and a writer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ckpt {

// Bits per element of a safetensors dtype string ("F32", "BF16", "I64", "F8_E4M3", "F4", ...);
// 0 when the string is not a safetensors dtype.
size_t safetensors_dtype_bits(std::string_view dtype);
std::string_view safetensors_allowed_dtypes();  // the list, for error messages
// The safetensors spelling of a Tessera dtype (f32 -> "F32", bf16 -> "BF16", u16 -> "U16", ...).
std::string_view safetensors_dtype_name(DType dtype);

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;        // the file's dtype string, e.g. "F32"
  Shape shape;              // [] for a scalar
  uint64_t data_begin = 0;  // byte range [data_begin, data_end) relative to the data section
  uint64_t data_end = 0;
  uint64_t nbytes() const { return data_end - data_begin; }
};

// One .safetensors file, mapped read-only. open() validates the whole header as the reference
// reader does (header <= 100 MB and inside the file, valid JSON object starting with '{', no
// duplicate names, known dtypes, end - begin == numel * bits / 8, tensors tiling the data section
// exactly with no gap, overlap or trailing bytes). Every error is a ConfigError naming the file
// (and the tensor when one is at fault). Copies share the mapping.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted by name
  bool contains(std::string_view name) const;
  const SafetensorsTensorInfo& info(std::string_view name) const;  // throws naming file and tensor
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"

  std::span<const std::byte> raw(std::string_view name) const;  // the tensor's bytes, little-endian
  // The tensor converted to f32; F32, F16, BF16 and F64 are accepted, anything else throws.
  std::vector<float> read_as_f32(std::string_view name) const;

 private:
  struct Mapping;
  std::filesystem::path path_;
  std::shared_ptr<const Mapping> mapping_;
  const std::byte* data_section_ = nullptr;
  std::map<std::string, SafetensorsTensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face checkpoint: a directory holding model.safetensors (preferred, as transformers does)
// or model.safetensors.index.json + its shards; a path to a .safetensors file or to an index file
// works too. Every name in the index's weight_map must exist in the shard it points to.
class SafetensorsCheckpoint {
 public:
  static SafetensorsCheckpoint open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  bool sharded() const { return sharded_; }
  std::vector<std::string> names() const;  // sorted by name
  bool contains(std::string_view name) const;
  const SafetensorsFile& file_of(std::string_view name) const;  // throws naming the checkpoint and tensor
  const SafetensorsTensorInfo& info(std::string_view name) const { return file_of(name).info(name); }
  std::span<const std::byte> raw(std::string_view name) const { return file_of(name).raw(name); }
  std::vector<float> read_as_f32(std::string_view name) const { return file_of(name).read_as_f32(name); }
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::filesystem::path path_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> file_of_name_;  // tensor name -> index into files_
};

// One tensor to write: bytes are little-endian, row-major, numel(shape) * bits(dtype) / 8 long,
// and must stay alive during the call.
struct SafetensorsTensorData {
  std::string name;
  std::string dtype;  // safetensors spelling, e.g. "F32"
  Shape shape;
  std::span<const std::byte> bytes;
};

// Writes path.tmp and renames it to path (so a reader never sees a partial file). Layout as the
// reference writer: tensors ordered by descending element size then name, header padded with
// spaces to a multiple of 8 bytes (every tensor naturally aligned). Metadata defaults to
// {"format": "pt"}, which transformers requires.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsTensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace tessera::ckpt
