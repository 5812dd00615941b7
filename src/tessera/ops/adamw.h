// AdamW (decoupled weight decay, as torch.optim.AdamW and Megatron's "adam"):
//   p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps)
// param, grad, exp_avg, exp_avg_sq: f32 of one shape. step counts from 1.
#pragma once
#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera::ops {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;
};

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWParams& params);

}  // namespace tessera::ops
