#include "tessera/optim/grad_clip.h"

#include <cmath>

#include "tessera/ops/elementwise.h"

namespace tessera::optim {

double local_sum_of_squares(const std::vector<Tensor>& grads) {
  double total = 0.0;
  for (const Tensor& g : grads) total += ops::sum_of_squares(g);
  return total;
}

double finish_grad_norm(double norm_sq_total) {
  TESSERA_CHECK(!(norm_sq_total < 0), "sum of squared gradients is negative: ", norm_sq_total);
  return std::sqrt(norm_sq_total);
}

double clip_coefficient(double norm, double clip_grad) {
  if (!(clip_grad > 0)) return 1.0;
  const double coefficient = clip_grad / (norm + 1.0e-6);
  return coefficient < 1.0 ? coefficient : 1.0;  // NaN compares false: no scaling
}

void scale_grads(const std::vector<Tensor>& grads, double coefficient) {
  if (coefficient == 1.0) return;
  for (const Tensor& g : grads) ops::scale_inplace(g, coefficient);
}

double clip_grad_norm(const std::vector<Tensor>& grads, double clip_grad) {
  const double norm = finish_grad_norm(local_sum_of_squares(grads));
  scale_grads(grads, clip_coefficient(norm, clip_grad));
  return norm;
}

}  // namespace tessera::optim
