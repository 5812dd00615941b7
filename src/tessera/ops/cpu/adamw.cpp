// CPU reference of the AdamW update (see adamw.h).
#include "tessera/ops/cpu/adamw.h"

#include <cmath>

namespace tessera::ops::cpu {

template <typename T>
void adamw_update(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamWParams& params) {
  const double b1 = params.beta1, b2 = params.beta2;
  const double bias_correction1 = 1.0 - std::pow(b1, double(params.step));
  const double bias_correction2 = 1.0 - std::pow(b2, double(params.step));
  const double decay = 1.0 - params.lr * params.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const double g = grad[i];
    const double m = b1 * double(exp_avg[i]) + (1.0 - b1) * g;
    const double v = b2 * double(exp_avg_sq[i]) + (1.0 - b2) * g * g;
    double p = double(param[i]) * decay;
    p -= params.lr * (m / bias_correction1) / (std::sqrt(v / bias_correction2) + params.eps);
    exp_avg[i] = static_cast<T>(m);
    exp_avg_sq[i] = static_cast<T>(v);
    param[i] = static_cast<T>(p);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWParams&);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, const AdamWParams&);

}  // namespace tessera::ops::cpu
