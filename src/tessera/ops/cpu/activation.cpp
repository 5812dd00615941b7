// CPU reference of tanh-approximated GeLU and its derivative (see activation.h).
#include "tessera/ops/cpu/activation.h"

#include <cmath>

namespace tessera::ops::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;
}  // namespace

template <typename T>
void gelu_forward(const T* in, int64_t n, T* out) {
  const T c = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kCubic);
  for (int64_t i = 0; i < n; ++i) {
    const T x = in[i];
    out[i] = T(0.5) * x * (T(1) + std::tanh(c * (x + a * x * x * x)));
  }
}

template <typename T>
void gelu_backward(const T* dout, const T* in, int64_t n, T* din) {
  const T c = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kCubic);
  for (int64_t i = 0; i < n; ++i) {
    const T x = in[i];
    const T t = std::tanh(c * (x + a * x * x * x));
    const T derivative = T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * a * x * x);
    din[i] = dout[i] * derivative;
  }
}

template <typename T>
void gelu_erf_forward(const T* in, int64_t n, T* out) {
  const T inv_sqrt2 = static_cast<T>(0.7071067811865476);
  for (int64_t i = 0; i < n; ++i) out[i] = T(0.5) * in[i] * (T(1) + std::erf(in[i] * inv_sqrt2));
}

template <typename T>
void gelu_erf_backward(const T* dout, const T* in, int64_t n, T* din) {
  const T inv_sqrt2 = static_cast<T>(0.7071067811865476), inv_sqrt_2pi = static_cast<T>(0.3989422804014327);
  for (int64_t i = 0; i < n; ++i) {
    const T x = in[i];
    const T derivative = T(0.5) * (T(1) + std::erf(x * inv_sqrt2)) + x * inv_sqrt_2pi * std::exp(T(-0.5) * x * x);
    din[i] = dout[i] * derivative;
  }
}

template <typename T>
void tanh_forward(const T* in, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
}

template <typename T>
void tanh_backward(const T* dout, const T* in, int64_t n, T* din) {
  for (int64_t i = 0; i < n; ++i) {
    const T t = std::tanh(in[i]);
    din[i] = dout[i] * (T(1) - t * t);
  }
}

template <typename T>
void relu_forward(const T* in, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] > T(0) ? in[i] : T(0);
}

template <typename T>
void relu_backward(const T* dout, const T* in, int64_t n, T* din) {
  for (int64_t i = 0; i < n; ++i) din[i] = in[i] > T(0) ? dout[i] : T(0);
}

#define TESSERA_INSTANTIATE_ACTIVATION(name)                               \
  template void name##_forward<float>(const float*, int64_t, float*);    \
  template void name##_forward<double>(const double*, int64_t, double*); \
  template void name##_backward<float>(const float*, const float*, int64_t, float*); \
  template void name##_backward<double>(const double*, const double*, int64_t, double*);
TESSERA_INSTANTIATE_ACTIVATION(gelu_erf)
TESSERA_INSTANTIATE_ACTIVATION(tanh)
TESSERA_INSTANTIATE_ACTIVATION(relu)
#undef TESSERA_INSTANTIATE_ACTIVATION

template void gelu_forward<float>(const float*, int64_t, float*);
template void gelu_forward<double>(const double*, int64_t, double*);
template void gelu_backward<float>(const float*, const float*, int64_t, float*);
template void gelu_backward<double>(const double*, const double*, int64_t, double*);

}  // namespace tessera::ops::cpu
