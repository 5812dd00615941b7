// CPU reference of RMSNorm over the last axis (see rmsnorm.h).
#include "tessera/ops/cpu/rmsnorm.h"

#include <cmath>
#include <vector>

namespace tessera::ops::cpu {

template <typename T>
void rmsnorm_forward(const T* in, const T* weight, double eps, int64_t rows, int64_t hidden, T* out, T* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = in + r * hidden;
    T* y = out + r * hidden;
    double squares = 0.0;
    for (int64_t j = 0; j < hidden; ++j) squares += double(x[j]) * double(x[j]);
    const double mean_square = hidden ? squares / double(hidden) : 0.0;
    const T s = static_cast<T>(1.0 / std::sqrt(mean_square + eps));
    for (int64_t j = 0; j < hidden; ++j) y[j] = x[j] * s * weight[j];
    rstd[r] = s;
  }
}

template <typename T>
void rmsnorm_backward(const T* dout, const T* in, const T* weight, const T* rstd, int64_t rows, int64_t hidden, T* din,
                      T* dweight) {
  std::vector<double> dweight_sum(static_cast<size_t>(hidden), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T* dy = dout + r * hidden;
    const T* x = in + r * hidden;
    T* dx = din + r * hidden;
    const T s = rstd[r];
    double g_xhat_sum = 0.0;
    for (int64_t j = 0; j < hidden; ++j) {
      const T xhat = x[j] * s;
      g_xhat_sum += double(dy[j] * weight[j]) * double(xhat);
      dweight_sum[j] += double(dy[j]) * double(xhat);
    }
    const T g_xhat_mean = static_cast<T>(g_xhat_sum / double(hidden));
    for (int64_t j = 0; j < hidden; ++j) {
      const T xhat = x[j] * s;
      dx[j] = s * (dy[j] * weight[j] - xhat * g_xhat_mean);
    }
  }
  for (int64_t j = 0; j < hidden; ++j) dweight[j] += static_cast<T>(dweight_sum[j]);
}

template void rmsnorm_forward<float>(const float*, const float*, double, int64_t, int64_t, float*, float*);
template void rmsnorm_forward<double>(const double*, const double*, double, int64_t, int64_t, double*, double*);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*, int64_t, int64_t, float*,
                                      float*);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*, int64_t, int64_t,
                                       double*, double*);

}  // namespace tessera::ops::cpu
