// CPU reference of the fused bias + dropout + residual add (see bias_dropout_add.h).
#include "tessera/ops/cpu/bias_dropout_add.h"

#include <vector>

#include "tessera/ops/cpu/dropout.h"

namespace tessera::ops::cpu {

template <typename T>
void bias_dropout_add_forward(const T* x, const T* bias, const T* residual, int64_t n, int64_t cols, double p,
                              const RandomStream& stream, uint64_t index_offset, T* out) {
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));  // as dropout_apply
  for (int64_t i = 0; i < n; ++i) {
    T v = x[i];
    if (bias) v = v + bias[i % cols];
    if (p != 0.0) v = dropout_keeps(stream, index_offset + static_cast<uint64_t>(i), p) ? v * keep_scale : T(0);
    out[i] = residual[i] + v;
  }
}

template <typename T>
void column_sum_accumulate(const T* dx, int64_t rows, int64_t cols, T* dbias) {
  std::vector<double> sums(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) sums[c] += double(dx[r * cols + c]);
  for (int64_t c = 0; c < cols; ++c) dbias[c] += static_cast<T>(sums[c]);
}

template void bias_dropout_add_forward<float>(const float*, const float*, const float*, int64_t, int64_t, double,
                                              const RandomStream&, uint64_t, float*);
template void bias_dropout_add_forward<double>(const double*, const double*, const double*, int64_t, int64_t, double,
                                               const RandomStream&, uint64_t, double*);
template void column_sum_accumulate<float>(const float*, int64_t, int64_t, float*);
template void column_sum_accumulate<double>(const double*, int64_t, int64_t, double*);

}  // namespace tessera::ops::cpu
