// Element types of tensors: the training dtypes (f32, bf16, f16), integer token/index types, and
// f64, which only the CPU reference uses (gradient checks against finite differences).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <string_view>

#include "tessera/core/half.h"

namespace tessera {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, u16, u8, f64 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
DType dtype_from_name(std::string_view name);  // throws ConfigError listing the allowed names
bool dtype_is_floating(DType dtype);

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, bf16>) return DType::bf16;
  else if constexpr (std::is_same_v<T, f16>) return DType::f16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, uint16_t>) return DType::u16;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::u8;
  else static_assert(sizeof(T) == 0, "no DType for this C++ type");
}

}  // namespace tessera
