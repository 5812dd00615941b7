#include "tessera/ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera::ckpt {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit

struct DTypeBits {
  std::string_view name;
  size_t bits;
};
constexpr DTypeBits kDTypes[] = {
    {"BOOL", 8},     {"U8", 8},          {"I8", 8},          {"F8_E5M2", 8},     {"F8_E4M3", 8},
    {"F8_E8M0", 8},  {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},        {"U16", 16},
    {"F16", 16},     {"BF16", 16},       {"I32", 32},        {"U32", 32},        {"F32", 32},
    {"F64", 64},     {"I64", 64},        {"U64", 64},        {"C64", 64},        {"F4", 4},
    {"F6_E2M3", 6},  {"F6_E3M2", 6},
};

std::string errno_text() { return std::strerror(errno); }

// numel(shape) * bits / 8 with overflow and sub-byte checks; the message names file and tensor.
uint64_t expected_bytes(const std::filesystem::path& path, const std::string& name, const Shape& shape,
                        size_t bits) {
  uint64_t total_bits = bits;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(total_bits, static_cast<uint64_t>(d), &total_bits))
      TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "' has shape ", shape_string(shape),
                          " whose byte size overflows 64 bits");
  if (total_bits % 8 != 0)
    TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "' of shape ", shape_string(shape), " holds ",
                        total_bits, " bits, not a whole number of bytes");
  return total_bits / 8;
}

// Parses JSON text, rejecting duplicate keys of the top-level object (nlohmann keeps the last).
json parse_json_no_duplicate_top_keys(const std::filesystem::path& path, std::string_view text,
                                      const char* what) {
  std::set<std::string> seen;
  std::string duplicate;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json value;
  try {
    value = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    TESSERA_CONFIG_FAIL(path.string(), ": ", what, " is not valid JSON: ", e.what());
  }
  if (!duplicate.empty()) TESSERA_CONFIG_FAIL(path.string(), ": ", what, " names '", duplicate, "' twice");
  if (!value.is_object()) TESSERA_CONFIG_FAIL(path.string(), ": ", what, " is not a JSON object");
  return value;
}

uint64_t json_unsigned(const std::filesystem::path& path, const std::string& name, const json& v,
                       const char* field) {
  if (!v.is_number_unsigned())
    TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': ", field, " must hold non-negative integers, got ",
                        v.dump());
  return v.get<uint64_t>();
}

SafetensorsTensorInfo parse_entry(const std::filesystem::path& path, const std::string& name, const json& entry) {
  if (!entry.is_object())
    TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': header entry is not an object: ", entry.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(field))
      TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': header entry lacks \"", field, "\"");
  SafetensorsTensorInfo info;
  info.name = name;
  if (!entry["dtype"].is_string())
    TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': dtype is not a string");
  info.dtype = entry["dtype"].get<std::string>();
  size_t bits = safetensors_dtype_bits(info.dtype);
  if (bits == 0)
    TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': unknown dtype '", info.dtype,
                        "'; allowed: ", safetensors_allowed_dtypes());
  const json& shape = entry["shape"];
  if (!shape.is_array()) TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': shape is not an array");
  for (const json& d : shape) {
    uint64_t dim = json_unsigned(path, name, d, "shape");
    if (dim > static_cast<uint64_t>(INT64_MAX))
      TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': dimension ", dim, " is too large");
    info.shape.push_back(static_cast<int64_t>(dim));
  }
  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': data_offsets must be [begin, end], got ",
                        offsets.dump());
  info.data_begin = json_unsigned(path, name, offsets[0], "data_offsets");
  info.data_end = json_unsigned(path, name, offsets[1], "data_offsets");
  if (info.data_end < info.data_begin)
    TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': data_offsets [", info.data_begin, ", ",
                        info.data_end, "] end before they begin");
  uint64_t expected = expected_bytes(path, name, info.shape, bits);
  if (info.nbytes() != expected)
    TESSERA_CONFIG_FAIL(path.string(), ": tensor '", name, "': data_offsets [", info.data_begin, ", ",
                        info.data_end, "] span ", info.nbytes(), " bytes but ", info.dtype,
                        shape_string(info.shape), " needs ", expected);
  return info;
}

}  // namespace

size_t safetensors_dtype_bits(std::string_view dtype) {
  for (const DTypeBits& d : kDTypes)
    if (d.name == dtype) return d.bits;
  return 0;
}

std::string_view safetensors_allowed_dtypes() {
  return "BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, I16, U16, F16, BF16, I32, U32, F32, "
         "F64, I64, U64, C64, F4, F6_E2M3, F6_E3M2";
}

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u16: return "U16";
    case DType::u8: return "U8";
    case DType::f64: return "F64";
  }
  TESSERA_FAIL("no safetensors name for dtype code ", static_cast<int>(dtype));
}

// ------------------------------------------------------------------------------------------------
// SafetensorsFile

struct SafetensorsFile::Mapping {
  void* address = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (address) munmap(address, size);
  }
};

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.path_ = path;
  const std::string where = path.string();

  int fd = ::open(where.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) TESSERA_CONFIG_FAIL(where, ": cannot open safetensors file: ", errno_text());
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    std::string reason = errno_text();
    ::close(fd);
    TESSERA_FAIL(where, ": fstat failed: ", reason);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    TESSERA_CONFIG_FAIL(where, ": not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    TESSERA_CONFIG_FAIL(where, ": truncated safetensors file: ", file_size,
                        " bytes, shorter than the 8-byte header length");
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->address = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  std::string mmap_error = mapping->address == MAP_FAILED ? errno_text() : "";
  ::close(fd);
  if (mapping->address == MAP_FAILED) {
    mapping->address = nullptr;
    TESSERA_FAIL(where, ": mmap of ", file_size, " bytes failed: ", mmap_error);
  }
  mapping->size = file_size;
  file.mapping_ = mapping;
  const auto* bytes = static_cast<const std::byte*>(mapping->address);

  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > kMaxHeaderBytes)
    TESSERA_CONFIG_FAIL(where, ": header length ", header_len, " exceeds the safetensors limit of ",
                        kMaxHeaderBytes, " bytes (corrupt or not a safetensors file)");
  if (header_len > file_size - 8)
    TESSERA_CONFIG_FAIL(where, ": header length ", header_len, " is larger than the ", file_size - 8,
                        " bytes that follow it (truncated or not a safetensors file)");
  std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_len);
  if (header.empty() || header.front() != '{')
    TESSERA_CONFIG_FAIL(where, ": the JSON header does not start with '{' (not a safetensors file)");
  json root = parse_json_no_duplicate_top_keys(path, header, "the JSON header");

  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object())
        TESSERA_CONFIG_FAIL(where, ": __metadata__ must be an object of strings, got ", it.value().dump());
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          TESSERA_CONFIG_FAIL(where, ": __metadata__ value of '", m.key(), "' must be a string, got ",
                              m.value().dump());
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    SafetensorsTensorInfo info = parse_entry(path, it.key(), it.value());
    auto [slot, inserted] = file.tensors_.emplace(info.name, std::move(info));
    by_offset.push_back(&slot->second);
  }

  // Offsets: inside the data section, tiling it from 0 to its end without gaps or overlaps.
  const uint64_t data_size = file_size - 8 - header_len;
  for (const SafetensorsTensorInfo* t : by_offset)
    if (t->data_end > data_size)
      TESSERA_CONFIG_FAIL(where, ": tensor '", t->name, "': data_offsets [", t->data_begin, ", ", t->data_end,
                          "] are out of bounds of the ", data_size, "-byte data section (truncated file?)");
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->data_begin != b->data_begin ? a->data_begin < b->data_begin : a->data_end < b->data_end;
  });
  uint64_t covered = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const SafetensorsTensorInfo* t : by_offset) {
    if (t->data_begin < covered)
      TESSERA_CONFIG_FAIL(where, ": tensor '", t->name, "' (bytes [", t->data_begin, ", ", t->data_end,
                          ")) overlaps tensor '", previous->name, "' (bytes [", previous->data_begin, ", ",
                          previous->data_end, "))");
    if (t->data_begin > covered)
      TESSERA_CONFIG_FAIL(where, ": unused bytes [", covered, ", ", t->data_begin, ") of the data section before tensor '",
                          t->name, "'");
    covered = t->data_end;
    previous = t;
  }
  if (covered != data_size)
    TESSERA_CONFIG_FAIL(where, ": the tensors cover ", covered, " bytes of the ", data_size,
                        "-byte data section; trailing bytes are not allowed");
  file.data_section_ = bytes + 8 + header_len;
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

bool SafetensorsFile::contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

const SafetensorsTensorInfo& SafetensorsFile::info(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    TESSERA_CONFIG_FAIL(path_.string(), ": no tensor named '", name, "' (the file holds ", tensors_.size(),
                        " tensors)");
  return it->second;
}

std::span<const std::byte> SafetensorsFile::raw(std::string_view name) const {
  const SafetensorsTensorInfo& t = info(name);
  return {data_section_ + t.data_begin, static_cast<size_t>(t.nbytes())};
}

std::vector<float> SafetensorsFile::read_as_f32(std::string_view name) const {
  const SafetensorsTensorInfo& t = info(name);
  std::span<const std::byte> bytes = raw(name);
  const size_t n = static_cast<size_t>(shape_numel(t.shape));
  std::vector<float> out(n);
  // memcpy per element: the data section need not be aligned (header lengths are not always 8k).
  if (t.dtype == "F32") {
    // An empty tensor: out.data() may be null, and memcpy's pointers must not be, even for 0 bytes.
    if (n != 0) std::memcpy(out.data(), bytes.data(), n * sizeof(float));
  } else if (t.dtype == "F64") {
    for (size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, bytes.data() + i * 8, 8);
      out[i] = static_cast<float>(v);
    }
  } else if (t.dtype == "F16") {
    for (size_t i = 0; i < n; ++i) {
      f16 v;
      std::memcpy(&v.bits, bytes.data() + i * 2, 2);
      out[i] = f16_to_float(v);
    }
  } else if (t.dtype == "BF16") {
    for (size_t i = 0; i < n; ++i) {
      bf16 v;
      std::memcpy(&v.bits, bytes.data() + i * 2, 2);
      out[i] = bf16_to_float(v);
    }
  } else {
    TESSERA_CONFIG_FAIL(path_.string(), ": tensor '", name, "' has dtype ", t.dtype,
                        "; read_as_f32 converts F32, F16, BF16 and F64");
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// SafetensorsCheckpoint

namespace {
constexpr const char* kSingleFileName = "model.safetensors";
constexpr const char* kIndexFileName = "model.safetensors.index.json";

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TESSERA_CONFIG_FAIL(path.string(), ": cannot open: ", errno_text());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) TESSERA_CONFIG_FAIL(path.string(), ": read error");
  return text.str();
}
}  // namespace

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::filesystem::path& path) {
  SafetensorsCheckpoint checkpoint;
  checkpoint.path_ = path;
  std::error_code ec;
  std::filesystem::path single, index;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path / kSingleFileName, ec)) single = path / kSingleFileName;
    else if (std::filesystem::exists(path / kIndexFileName, ec)) index = path / kIndexFileName;
    else
      TESSERA_CONFIG_FAIL(path.string(), ": no Hugging Face checkpoint here: expected ", kSingleFileName, " or ",
                          kIndexFileName);
  } else if (std::filesystem::exists(path, ec)) {
    if (path.string().ends_with(".json")) index = path;
    else single = path;
  } else {
    TESSERA_CONFIG_FAIL(path.string(), ": no such file or directory (expected a directory with ", kSingleFileName,
                        " or ", kIndexFileName, ", or a .safetensors file)");
  }

  if (!single.empty()) {
    checkpoint.files_.push_back(SafetensorsFile::open(single));
    for (const std::string& name : checkpoint.files_.back().names()) checkpoint.file_of_name_.emplace(name, 0);
    return checkpoint;
  }

  checkpoint.sharded_ = true;
  const std::string where = index.string();
  json root = parse_json_no_duplicate_top_keys(index, read_text_file(index), "the index");
  if (!root.contains("weight_map") || !root["weight_map"].is_object())
    TESSERA_CONFIG_FAIL(where, ": the index has no \"weight_map\" object (tensor name -> shard file)");
  const std::filesystem::path directory = index.parent_path();
  std::map<std::string, size_t> shard_index;  // shard file name -> files_ index
  for (auto it = root["weight_map"].begin(); it != root["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      TESSERA_CONFIG_FAIL(where, ": weight_map entry of tensor '", it.key(), "' is not a file name: ",
                          it.value().dump());
    const std::string shard = it.value().get<std::string>();
    const std::filesystem::path shard_path(shard);
    if (shard.empty() || shard_path.is_absolute() ||
        std::any_of(shard_path.begin(), shard_path.end(), [](const auto& part) { return part == ".."; }))
      TESSERA_CONFIG_FAIL(where, ": weight_map entry of tensor '", it.key(), "' names shard '", shard,
                          "'; shards must be relative paths inside the checkpoint directory");
    auto [slot, inserted] = shard_index.emplace(shard, checkpoint.files_.size());
    if (inserted) checkpoint.files_.push_back(SafetensorsFile::open(directory / shard_path));
    const SafetensorsFile& file = checkpoint.files_[slot->second];
    if (!file.contains(it.key()))
      TESSERA_CONFIG_FAIL(where, ": tensor '", it.key(), "' is mapped to shard ", shard, " but ",
                          file.path().string(), " does not contain it");
    checkpoint.file_of_name_.emplace(it.key(), slot->second);
  }
  if (checkpoint.file_of_name_.empty()) TESSERA_CONFIG_FAIL(where, ": the index's weight_map is empty");
  return checkpoint;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(file_of_name_.size());
  for (const auto& [name, file] : file_of_name_) out.push_back(name);
  return out;
}

bool SafetensorsCheckpoint::contains(std::string_view name) const {
  return file_of_name_.find(name) != file_of_name_.end();
}

const SafetensorsFile& SafetensorsCheckpoint::file_of(std::string_view name) const {
  auto it = file_of_name_.find(name);
  if (it == file_of_name_.end())
    TESSERA_CONFIG_FAIL(path_.string(), ": the checkpoint has no tensor named '", name, "' (it holds ",
                        file_of_name_.size(), " tensors)");
  return files_[it->second];
}

// ------------------------------------------------------------------------------------------------
// Writer

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsTensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string where = path.string();
  std::set<std::string_view> seen;
  for (const SafetensorsTensorData& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      TESSERA_FAIL(where, ": cannot write a tensor named '", t.name, "'");
    if (!seen.insert(t.name).second) TESSERA_FAIL(where, ": tensor '", t.name, "' is given twice");
    size_t bits = safetensors_dtype_bits(t.dtype);
    if (bits == 0)
      TESSERA_FAIL(where, ": tensor '", t.name, "': unknown dtype '", t.dtype, "'; allowed: ",
                   safetensors_allowed_dtypes());
    for (int64_t d : t.shape) TESSERA_CHECK(d >= 0, where, ": tensor '", t.name, "' has a negative dimension");
    uint64_t expected = expected_bytes(path, t.name, t.shape, bits);
    if (t.bytes.size() != expected)
      TESSERA_FAIL(where, ": tensor '", t.name, "' (", t.dtype, shape_string(t.shape), ") needs ", expected,
                   " bytes, got ", t.bytes.size());
  }

  // Order: descending element size (natural alignment within an 8-aligned data section), then name.
  std::vector<const SafetensorsTensorData*> order;
  for (const SafetensorsTensorData& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    size_t bits_a = safetensors_dtype_bits(a->dtype), bits_b = safetensors_dtype_bits(b->dtype);
    return bits_a != bits_b ? bits_a > bits_b : a->name < b->name;
  });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsTensorData* t : order) {
    header[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_len = header_text.size();

  const std::filesystem::path tmp = path.string() + ".tmp";
  std::error_code ec;  // cleanup of tmp on failure is best effort
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (!out) TESSERA_FAIL(tmp.string(), ": cannot create: ", errno_text());
  auto write = [&](const void* data, size_t size) {
    if (size != 0 && std::fwrite(data, 1, size, out) != size) {
      std::string reason = errno_text();
      std::fclose(out);
      std::filesystem::remove(tmp, ec);
      TESSERA_FAIL(tmp.string(), ": write failed: ", reason);
    }
  };
  write(&header_len, 8);
  write(header_text.data(), header_text.size());
  for (const SafetensorsTensorData* t : order) write(t->bytes.data(), t->bytes.size());
  if (std::fflush(out) != 0 || fsync(fileno(out)) != 0) {
    std::string reason = errno_text();
    std::fclose(out);
    std::filesystem::remove(tmp, ec);
    TESSERA_FAIL(tmp.string(), ": flush to disk failed: ", reason);
  }
  if (std::fclose(out) != 0) {
    std::string reason = errno_text();
    std::filesystem::remove(tmp, ec);
    TESSERA_FAIL(tmp.string(), ": close failed: ", reason);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::string reason = ec.message();
    std::filesystem::remove(tmp, ec);
    TESSERA_FAIL("cannot rename ", tmp.string(), " to ", where, ": ", reason);
  }
}

}  // namespace tessera::ckpt
