// CPU reference of the elementwise helpers (see elementwise.h).
#include "tessera/ops/cpu/elementwise.h"

#include <algorithm>

namespace tessera::ops::cpu {

template <typename T>
void add(const T* a, const T* b, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = from_compute<T>(to_compute(a[i]) + to_compute(b[i]));
}

template <typename T>
void add_inplace(T* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = from_compute<T>(to_compute(dst[i]) + to_compute(src[i]));
}

template <typename T>
void scale_inplace(T* dst, int64_t n, double factor) {
  using C = decltype(to_compute(T{}));
  const C f = static_cast<C>(factor);
  for (int64_t i = 0; i < n; ++i) dst[i] = from_compute<T>(to_compute(dst[i]) * f);
}

template <typename T>
void fill(T* dst, int64_t n, double value) {
  std::fill_n(dst, n, from_compute<T>(value));
}

template <typename S, typename D>
void convert(const S* src, int64_t n, D* dst) {
  if constexpr (std::is_same_v<S, D>) {
    std::copy_n(src, n, dst);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = from_compute<D>(to_compute(src[i]));
  }
}

template <typename T>
double sum_of_squares(const T* values, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = to_compute(values[i]);
    sum += v * v;
  }
  return sum;
}

#define TESSERA_INSTANTIATE_ELEMENTWISE(T)                    \
  template void add<T>(const T*, const T*, int64_t, T*);      \
  template void add_inplace<T>(T*, const T*, int64_t);        \
  template void scale_inplace<T>(T*, int64_t, double);        \
  template void fill<T>(T*, int64_t, double);                 \
  template double sum_of_squares<T>(const T*, int64_t);       \
  template void convert<T, float>(const T*, int64_t, float*); \
  template void convert<T, double>(const T*, int64_t, double*); \
  template void convert<T, bf16>(const T*, int64_t, bf16*);   \
  template void convert<T, f16>(const T*, int64_t, f16*);
TESSERA_INSTANTIATE_ELEMENTWISE(float)
TESSERA_INSTANTIATE_ELEMENTWISE(double)
TESSERA_INSTANTIATE_ELEMENTWISE(bf16)
TESSERA_INSTANTIATE_ELEMENTWISE(f16)
#undef TESSERA_INSTANTIATE_ELEMENTWISE
template void fill<int32_t>(int32_t*, int64_t, double);
template void fill<int64_t>(int64_t*, int64_t, double);
template void fill<uint16_t>(uint16_t*, int64_t, double);
template void fill<uint8_t>(uint8_t*, int64_t, double);

}  // namespace tessera::ops::cpu
