// exp and max for the CPU cross-entropy loops: a Cephes-style exp polynomial for float (a few ulp),
// written with GCC/Clang vector extensions so it runs 4 lanes at a time; double uses std::exp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tessera::ops::cpu {

using float4_lanes = float __attribute__((vector_size(16)));
using int4_lanes = int32_t __attribute__((vector_size(16)));

// exp of 4 floats; arguments below -87.3 (where expf leaves the normal range) give exactly 0,
// arguments above 88 are clamped to 88.
inline float4_lanes expf_polynomial(float4_lanes x) {
  const float4_lanes low = float4_lanes{} - 87.3f, high = float4_lanes{} + 88.0f;
  const int4_lanes below = x < low;  // all ones where true
  float4_lanes c = (float4_lanes)(((int4_lanes)x & ~below) | ((int4_lanes)low & below));
  const int4_lanes above = c > high;
  c = (float4_lanes)(((int4_lanes)c & ~above) | ((int4_lanes)high & above));
  const float4_lanes scaled = c * 1.44269504088896341f + 0.5f;  // x / ln 2 + 1/2
  int4_lanes n = __builtin_convertvector(scaled, int4_lanes);    // truncation ...
  n += (int4_lanes)(__builtin_convertvector(n, float4_lanes) > scaled);  // ... made floor
  const float4_lanes nf = __builtin_convertvector(n, float4_lanes);
  const float4_lanes r = c - nf * 0.693359375f + nf * 2.12194440e-4f;  // x - n ln 2 in two parts
  float4_lanes p = float4_lanes{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float4_lanes poly = p * r * r + r + 1.0f;
  const float4_lanes result = poly * (float4_lanes)((n + 127) << 23);  // times 2^n
  return (float4_lanes)((int4_lanes)result & ~below);
}

inline float expf_polynomial(float x) { return expf_polynomial(float4_lanes{x, x, x, x})[0]; }

template <typename T>
inline T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) return expf_polynomial(x);
  else return std::exp(x);
}

// out[j] = scale * exp(in[j] - shift) for j < n (out may alias in).
template <typename T>
void scaled_exp_shifted(const T* in, int64_t n, T shift, T scale, T* out) {
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; j + 4 <= n; j += 4) {
      float4_lanes v;
      std::memcpy(&v, in + j, sizeof v);
      v = expf_polynomial(v - shift) * scale;
      std::memcpy(out + j, &v, sizeof v);
    }
  }
  for (; j < n; ++j) out[j] = scale * exp_of<T>(in[j] - shift);
}

// The largest of in[0..n), n >= 1 (4 lanes at a time for float).
template <typename T>
T max_of(const T* in, int64_t n) {
  T result = in[0];
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (n >= 4) {
      float4_lanes best;
      std::memcpy(&best, in, sizeof best);
      for (j = 4; j + 4 <= n; j += 4) {
        float4_lanes v;
        std::memcpy(&v, in + j, sizeof v);
        const int4_lanes greater = v > best;
        best = (float4_lanes)(((int4_lanes)v & greater) | ((int4_lanes)best & ~greater));
      }
      for (int k = 0; k < 4; ++k) result = best[k] > result ? best[k] : result;
    }
  }
  for (; j < n; ++j) result = in[j] > result ? in[j] : result;
  return result;
}

// out[j] = exp(in[j] - shift) for j < n; returns their sum (float lanes summed over blocks of 256
// elements, the blocks accumulated in double).
template <typename T>
double exp_shifted_and_sum(const T* in, int64_t n, T shift, T* out) {
  double sum = 0;
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    while (j + 4 <= n) {
      float4_lanes block = {0, 0, 0, 0};
      const int64_t block_end = j + 256 < n ? j + 256 : n;
      for (; j + 4 <= block_end; j += 4) {
        float4_lanes v;
        std::memcpy(&v, in + j, sizeof v);
        v = expf_polynomial(v - shift);
        std::memcpy(out + j, &v, sizeof v);
        block += v;
      }
      sum += double(block[0]) + double(block[1]) + double(block[2]) + double(block[3]);
    }
  }
  for (; j < n; ++j) {
    out[j] = exp_of<T>(in[j] - shift);
    sum += out[j];
  }
  return sum;
}

}  // namespace tessera::ops::cpu
