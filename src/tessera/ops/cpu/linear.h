// CPU reference of the linear layer and the shared NT GEMM, on raw row-major arrays (float, double).
// in [rows, in_features], weight [out_features, in_features], out [rows, out_features].
#pragma once
#include <cstdint>

namespace tessera::ops::cpu {

// out = in . weight^T (+ bias, which may be null).
template <typename T>
void linear_forward(const T* in, const T* weight, const T* bias, int64_t rows, int64_t in_features,
                    int64_t out_features, T* out);
// din = dout . weight (overwritten; skipped if null); dweight += dout^T . in and dbias += column sums
// of dout (each skipped if null).
template <typename T>
void linear_backward(const T* dout, const T* in, const T* weight, int64_t rows, int64_t in_features,
                     int64_t out_features, T* din, T* dweight, T* dbias);
// out[m, n] = a[m, k] . b[n, k]^T (+ out if accumulate).
template <typename T>
void matmul_nt(const T* a, const T* b, int64_t m, int64_t n, int64_t k, T* out, bool accumulate);

}  // namespace tessera::ops::cpu
