// CPU reference of the elementwise helpers (add, accumulate, scale, fill, copy with conversion, sum of
// squares) for every float storage type: float, double, bf16 and f16 (the half types compute in float).
#pragma once
#include <cstdint>
#include <type_traits>

#include "tessera/core/half.h"

namespace tessera::ops::cpu {

// Conversions between a storage type and its compute type (float for bf16/f16).
inline float to_compute(bf16 v) { return bf16_to_float(v); }
inline float to_compute(f16 v) { return f16_to_float(v); }
inline float to_compute(float v) { return v; }
inline double to_compute(double v) { return v; }
template <typename T, typename C>
T from_compute(C value) {
  if constexpr (std::is_same_v<T, bf16>) return float_to_bf16(static_cast<float>(value));
  else if constexpr (std::is_same_v<T, f16>) return float_to_f16(static_cast<float>(value));
  else return static_cast<T>(value);
}

template <typename T>
void add(const T* a, const T* b, int64_t n, T* out);  // may alias
template <typename T>
void add_inplace(T* dst, const T* src, int64_t n);
template <typename T>
void scale_inplace(T* dst, int64_t n, double factor);
template <typename T>
void fill(T* dst, int64_t n, double value);  // also instantiated for int32_t, int64_t, uint16_t, uint8_t
template <typename S, typename D>
void convert(const S* src, int64_t n, D* dst);
template <typename T>
double sum_of_squares(const T* values, int64_t n);  // accumulated in double

}  // namespace tessera::ops::cpu
