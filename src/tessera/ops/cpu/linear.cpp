// CPU reference of the linear layer and the shared NT GEMM (see linear.h); GEMMs through CBLAS.
#include "tessera/ops/cpu/linear.h"

#include <cstddef>
#include <vector>

#include "tessera/ops/cpu/blas.h"

namespace tessera::ops::cpu {

template <typename T>
void matmul_nt(const T* a, const T* b, int64_t m, int64_t n, int64_t k, T* out, bool accumulate) {
  gemm<T>(false, true, m, n, k, T(1), a, k, b, k, accumulate ? T(1) : T(0), out, n);
}

template <typename T>
void linear_forward(const T* in, const T* weight, const T* bias, int64_t rows, int64_t in_features,
                    int64_t out_features, T* out) {
  if (bias) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out_features; ++o) out[r * out_features + o] = bias[o];
  }
  matmul_nt<T>(in, weight, rows, out_features, in_features, out, bias != nullptr);
}

template <typename T>
void linear_backward(const T* dout, const T* in, const T* weight, int64_t rows, int64_t in_features,
                     int64_t out_features, T* din, T* dweight, T* dbias) {
  if (din) gemm<T>(false, false, rows, in_features, out_features, T(1), dout, out_features, weight, in_features, T(0),
                   din, in_features);
  if (dweight) gemm<T>(true, false, out_features, in_features, rows, T(1), dout, out_features, in, in_features, T(1),
                       dweight, in_features);
  if (dbias) {
    std::vector<double> column_sums(static_cast<size_t>(out_features), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = dout + r * out_features;
      for (int64_t o = 0; o < out_features; ++o) column_sums[o] += row[o];
    }
    for (int64_t o = 0; o < out_features; ++o) dbias[o] += static_cast<T>(column_sums[o]);
  }
}

#define TESSERA_INSTANTIATE_LINEAR(T)                                                                       \
  template void linear_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*);            \
  template void linear_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, T*, T*); \
  template void matmul_nt<T>(const T*, const T*, int64_t, int64_t, int64_t, T*, bool);
TESSERA_INSTANTIATE_LINEAR(float)
TESSERA_INSTANTIATE_LINEAR(double)
#undef TESSERA_INSTANTIATE_LINEAR

}  // namespace tessera::ops::cpu
