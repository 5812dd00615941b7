// CPU reference of RMSNorm over the last axis, on raw row-major arrays (float, double).
// in/out/din [rows, hidden]; weight/dweight [hidden]; rstd [rows].
#pragma once
#include <cstdint>

namespace tessera::ops::cpu {

// rstd = 1 / sqrt(mean(x^2) + eps) accumulated in double; out = x * rstd * weight.
template <typename T>
void rmsnorm_forward(const T* in, const T* weight, double eps, int64_t rows, int64_t hidden, T* out, T* rstd);
// din = rstd * (g - xhat * mean(g * xhat)) with g = dout * weight, xhat = x * rstd; din overwritten
// (may alias dout); dweight accumulates (+=) sum over rows of dout * xhat.
template <typename T>
void rmsnorm_backward(const T* dout, const T* in, const T* weight, const T* rstd, int64_t rows, int64_t hidden, T* din,
                      T* dweight);

}  // namespace tessera::ops::cpu
