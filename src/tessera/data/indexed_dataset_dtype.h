// The token dtype codes of Megatron's MMIDIDX index (1 uint8 ... 8 uint16), their sizes and
// names, and the dtype Megatron picks for a vocabulary (uint16 below 65500 ids, else int32).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::data {

enum class IndexDType : uint8_t {
  uint8 = 1,
  int8 = 2,
  int16 = 3,
  int32 = 4,
  int64 = 5,
  float64 = 6,
  float32 = 7,
  uint16 = 8,
};

bool is_valid_index_dtype_code(uint8_t code);
// Throws ConfigError for an unknown code (`where` names the file that holds it).
IndexDType index_dtype_from_code(uint8_t code, const std::string& where);
size_t index_dtype_size(IndexDType dtype);
const char* index_dtype_name(IndexDType dtype);
// Megatron's DType.optimal_dtype: uint16 if vocab_size < 65500, else int32.
IndexDType optimal_index_dtype(int64_t vocab_size);

// Reads element i of an array of `dtype` at `base` (no alignment needed) as an int64 / writes one.
int64_t load_index_element(IndexDType dtype, const unsigned char* base, size_t i);
void store_index_element(IndexDType dtype, unsigned char* base, size_t i, int64_t value);
// Whether `value` is representable exactly in `dtype`.
bool index_value_fits(IndexDType dtype, int64_t value);

}  // namespace tessera::data
