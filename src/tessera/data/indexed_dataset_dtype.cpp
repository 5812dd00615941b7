#include "tessera/data/indexed_dataset_dtype.h"

#include <cstring>
#include <limits>

#include "tessera/core/error.h"

namespace tessera::data {

bool is_valid_index_dtype_code(uint8_t code) { return code >= 1 && code <= 8; }

IndexDType index_dtype_from_code(uint8_t code, const std::string& where) {
  if (!is_valid_index_dtype_code(code))
    TESSERA_CONFIG_FAIL(where, ": unknown dtype code ", static_cast<int>(code),
                        " (allowed: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)");
  return static_cast<IndexDType>(code);
}

size_t index_dtype_size(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::uint8:
    case IndexDType::int8: return 1;
    case IndexDType::int16:
    case IndexDType::uint16: return 2;
    case IndexDType::int32:
    case IndexDType::float32: return 4;
    case IndexDType::int64:
    case IndexDType::float64: return 8;
  }
  TESSERA_FAIL("invalid IndexDType ", static_cast<int>(dtype));
}

const char* index_dtype_name(IndexDType dtype) {
  switch (dtype) {
    case IndexDType::uint8: return "uint8";
    case IndexDType::int8: return "int8";
    case IndexDType::int16: return "int16";
    case IndexDType::int32: return "int32";
    case IndexDType::int64: return "int64";
    case IndexDType::float64: return "float64";
    case IndexDType::float32: return "float32";
    case IndexDType::uint16: return "uint16";
  }
  return "invalid";
}

IndexDType optimal_index_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexDType::uint16 : IndexDType::int32;
}

namespace {
template <typename T>
T load_as(const unsigned char* base, size_t i) {
  T v;
  std::memcpy(&v, base + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void store_as(unsigned char* base, size_t i, T v) {
  std::memcpy(base + i * sizeof(T), &v, sizeof(T));
}
template <typename T>
bool fits(int64_t v) {
  return v >= static_cast<int64_t>(std::numeric_limits<T>::lowest()) &&
         v <= static_cast<int64_t>(std::numeric_limits<T>::max());
}
}  // namespace

int64_t load_index_element(IndexDType dtype, const unsigned char* base, size_t i) {
  switch (dtype) {
    case IndexDType::uint8: return load_as<uint8_t>(base, i);
    case IndexDType::int8: return load_as<int8_t>(base, i);
    case IndexDType::int16: return load_as<int16_t>(base, i);
    case IndexDType::uint16: return load_as<uint16_t>(base, i);
    case IndexDType::int32: return load_as<int32_t>(base, i);
    case IndexDType::int64: return load_as<int64_t>(base, i);
    case IndexDType::float32: return static_cast<int64_t>(load_as<float>(base, i));
    case IndexDType::float64: return static_cast<int64_t>(load_as<double>(base, i));
  }
  return 0;
}

void store_index_element(IndexDType dtype, unsigned char* base, size_t i, int64_t value) {
  switch (dtype) {
    case IndexDType::uint8: store_as<uint8_t>(base, i, static_cast<uint8_t>(value)); break;
    case IndexDType::int8: store_as<int8_t>(base, i, static_cast<int8_t>(value)); break;
    case IndexDType::int16: store_as<int16_t>(base, i, static_cast<int16_t>(value)); break;
    case IndexDType::uint16: store_as<uint16_t>(base, i, static_cast<uint16_t>(value)); break;
    case IndexDType::int32: store_as<int32_t>(base, i, static_cast<int32_t>(value)); break;
    case IndexDType::int64: store_as<int64_t>(base, i, value); break;
    case IndexDType::float32: store_as<float>(base, i, static_cast<float>(value)); break;
    case IndexDType::float64: store_as<double>(base, i, static_cast<double>(value)); break;
  }
}

bool index_value_fits(IndexDType dtype, int64_t value) {
  switch (dtype) {
    case IndexDType::uint8: return fits<uint8_t>(value);
    case IndexDType::int8: return fits<int8_t>(value);
    case IndexDType::int16: return fits<int16_t>(value);
    case IndexDType::uint16: return fits<uint16_t>(value);
    case IndexDType::int32: return fits<int32_t>(value);
    case IndexDType::int64: return true;
    case IndexDType::float32: return value >= -(int64_t{1} << 24) && value <= (int64_t{1} << 24);
    case IndexDType::float64: return value >= -(int64_t{1} << 53) && value <= (int64_t{1} << 53);
  }
  return false;
}

}  // namespace tessera::data
