// CPU reference of LayerNorm over the last axis (see layernorm.h).
#include "tessera/ops/cpu/layernorm.h"

#include <cmath>
#include <vector>

namespace tessera::ops::cpu {

template <typename T>
void layernorm_forward(const T* in, const T* weight, const T* bias, double eps, int64_t rows, int64_t hidden, T* out,
                       T* mean, T* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = in + r * hidden;
    T* y = out + r * hidden;
    double sum = 0.0;
    for (int64_t j = 0; j < hidden; ++j) sum += x[j];
    const double row_mean = hidden ? sum / double(hidden) : 0.0;
    double squares = 0.0;
    for (int64_t j = 0; j < hidden; ++j) {
      const double centered = double(x[j]) - row_mean;
      squares += centered * centered;
    }
    const double variance = hidden ? squares / double(hidden) : 0.0;
    const double row_rstd = 1.0 / std::sqrt(variance + eps);
    const T m = static_cast<T>(row_mean), s = static_cast<T>(row_rstd);
    for (int64_t j = 0; j < hidden; ++j) y[j] = (x[j] - m) * s * weight[j] + bias[j];
    mean[r] = m;
    rstd[r] = s;
  }
}

template <typename T>
void layernorm_backward(const T* dout, const T* in, const T* weight, const T* mean, const T* rstd, int64_t rows,
                        int64_t hidden, T* din, T* dweight, T* dbias, const T* residual_grad) {
  std::vector<double> dweight_sum(static_cast<size_t>(hidden), 0.0), dbias_sum(static_cast<size_t>(hidden), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T* dy = dout + r * hidden;
    const T* x = in + r * hidden;
    T* dx = din + r * hidden;
    const T* residual = residual_grad ? residual_grad + r * hidden : nullptr;
    const T m = mean[r], s = rstd[r];
    // din = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight.
    double g_sum = 0.0, g_xhat_sum = 0.0;
    for (int64_t j = 0; j < hidden; ++j) {
      const T xhat = (x[j] - m) * s;
      const T g = dy[j] * weight[j];
      g_sum += g;
      g_xhat_sum += double(g) * double(xhat);
      dweight_sum[j] += double(dy[j]) * double(xhat);
      dbias_sum[j] += dy[j];
    }
    const T g_mean = static_cast<T>(g_sum / double(hidden));
    const T g_xhat_mean = static_cast<T>(g_xhat_sum / double(hidden));
    for (int64_t j = 0; j < hidden; ++j) {
      const T xhat = (x[j] - m) * s;
      const T norm_grad = s * (dy[j] * weight[j] - g_mean - xhat * g_xhat_mean);
      dx[j] = residual ? norm_grad + residual[j] : norm_grad;
    }
  }
  for (int64_t j = 0; j < hidden; ++j) {
    dweight[j] += static_cast<T>(dweight_sum[j]);
    dbias[j] += static_cast<T>(dbias_sum[j]);
  }
}

template void layernorm_forward<float>(const float*, const float*, const float*, double, int64_t, int64_t, float*,
                                       float*, float*);
template void layernorm_forward<double>(const double*, const double*, const double*, double, int64_t, int64_t,
                                        double*, double*, double*);
template void layernorm_backward<float>(const float*, const float*, const float*, const float*, const float*, int64_t,
                                        int64_t, float*, float*, float*, const float*);
template void layernorm_backward<double>(const double*, const double*, const double*, const double*, const double*,
                                         int64_t, int64_t, double*, double*, double*, const double*);

}  // namespace tessera::ops::cpu
