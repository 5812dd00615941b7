#include "tessera/ops/cpu/swiglu.h"

#include <cmath>

namespace tessera::ops::cpu {

template <typename T>
void swiglu_forward(const T* in, int64_t count, T* out) {
  for (int64_t j = 0; j < count; ++j) {
    const T g = in[2 * j], u = in[2 * j + 1];
    const T sig = T(1) / (T(1) + std::exp(-g));
    out[j] = g * sig * u;
  }
}

template <typename T>
void swiglu_backward(const T* dout, const T* in, int64_t count, T* din) {
  for (int64_t j = 0; j < count; ++j) {
    const T g = in[2 * j], u = in[2 * j + 1], d = dout[j];
    const T sig = T(1) / (T(1) + std::exp(-g));
    din[2 * j] = d * u * sig * (T(1) + g * (T(1) - sig));  // d silu(g) / dg = sig (1 + g (1 - sig))
    din[2 * j + 1] = d * g * sig;
  }
}

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654, kCubic = 0.044715;
}  // namespace

template <typename T>
void geglu_forward(const T* in, int64_t count, T* out) {
  const T c = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kCubic);
  for (int64_t j = 0; j < count; ++j) {
    const T g = in[2 * j], u = in[2 * j + 1];
    out[j] = T(0.5) * g * (T(1) + std::tanh(c * (g + a * g * g * g))) * u;
  }
}

template <typename T>
void geglu_backward(const T* dout, const T* in, int64_t count, T* din) {
  const T c = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kCubic);
  for (int64_t j = 0; j < count; ++j) {
    const T g = in[2 * j], u = in[2 * j + 1], d = dout[j];
    const T t = std::tanh(c * (g + a * g * g * g));
    const T gelu = T(0.5) * g * (T(1) + t);
    const T dgelu = T(0.5) * (T(1) + t) + T(0.5) * g * (T(1) - t * t) * c * (T(1) + T(3) * a * g * g);
    din[2 * j] = d * u * dgelu;
    din[2 * j + 1] = d * gelu;
  }
}

template void geglu_forward<float>(const float*, int64_t, float*);
template void geglu_forward<double>(const double*, int64_t, double*);
template void geglu_backward<float>(const float*, const float*, int64_t, float*);
template void geglu_backward<double>(const double*, const double*, int64_t, double*);
template void swiglu_forward<float>(const float*, int64_t, float*);
template void swiglu_forward<double>(const double*, int64_t, double*);
template void swiglu_backward<float>(const float*, const float*, int64_t, float*);
template void swiglu_backward<double>(const double*, const double*, int64_t, double*);

}  // namespace tessera::ops::cpu
