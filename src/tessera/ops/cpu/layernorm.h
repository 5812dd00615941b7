// CPU reference of LayerNorm over the last axis, on raw row-major arrays (float, double).
// in/out/din [rows, hidden]; weight/bias/dweight/dbias [hidden]; mean/rstd [rows].
#pragma once
#include <cstdint>

namespace tessera::ops::cpu {

// Biased variance; rstd = 1 / sqrt(var + eps). Row statistics are accumulated in double.
template <typename T>
void layernorm_forward(const T* in, const T* weight, const T* bias, double eps, int64_t rows, int64_t hidden, T* out,
                       T* mean, T* rstd);
// din overwritten (may alias dout), plus residual_grad when not null; dweight and dbias accumulate (+=).
template <typename T>
void layernorm_backward(const T* dout, const T* in, const T* weight, const T* mean, const T* rstd, int64_t rows,
                        int64_t hidden, T* din, T* dweight, T* dbias, const T* residual_grad);

}  // namespace tessera::ops::cpu
