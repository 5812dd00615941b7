#include "tessera/core/half.h"

#include <cmath>

namespace tessera {

float f16_to_float(f16 v) {
  uint32_t sign = (v.bits & 0x8000u) << 16;
  uint32_t exponent = (v.bits >> 10) & 0x1fu;
  uint32_t mantissa = v.bits & 0x3ffu;
  uint32_t u;
  if (exponent == 0) {
    if (mantissa == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while ((mantissa & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mantissa & 0x3ffu) << 13;
    }
  } else if (exponent == 0x1f) {
    u = sign | 0x7f800000u | mantissa << 13;
  } else {
    u = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return f16{static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {  // below the smallest normal f16: subnormal or zero
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    // round-to-nearest-even in units of 2^-24
    float scaled = magnitude * 16777216.0f;
    uint32_t q = static_cast<uint32_t>(std::nearbyint(scaled));
    return f16{static_cast<uint16_t>(sign | q)};
  }
  uint32_t exponent = ((abs >> 23) - 127 + 15);
  uint32_t mantissa = abs & 0x7fffffu;
  uint32_t half = exponent << 10 | mantissa >> 13;
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return f16{static_cast<uint16_t>(sign | half)};
}

}  // namespace tessera
