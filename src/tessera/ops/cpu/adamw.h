// CPU reference of the AdamW update (decoupled weight decay) on raw arrays of n elements (float, double).
#pragma once
#include <cstdint>

#include "tessera/ops/adamw.h"

namespace tessera::ops::cpu {

// Per element, computed in double: p -= lr wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps).
template <typename T>
void adamw_update(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t n, const AdamWParams& params);

}  // namespace tessera::ops::cpu
