// CPU reference of GeLU with the tanh approximation (GPT-2's gelu_new), on raw arrays (float, double).
#pragma once
#include <cstdint>

namespace tessera::ops::cpu {

template <typename T>
void gelu_forward(const T* in, int64_t n, T* out);
// din = dout * gelu'(in); din overwritten (may alias dout).
template <typename T>
void gelu_backward(const T* dout, const T* in, int64_t n, T* din);

// Exact (erf) GeLU and tanh, forward and din = dout * f'(in).
template <typename T>
void gelu_erf_forward(const T* in, int64_t n, T* out);
template <typename T>
void gelu_erf_backward(const T* dout, const T* in, int64_t n, T* din);
template <typename T>
void tanh_forward(const T* in, int64_t n, T* out);
template <typename T>
void tanh_backward(const T* dout, const T* in, int64_t n, T* din);
// relu(x) = max(x, 0); its derivative is taken as 0 at x = 0 (as torch's).
template <typename T>
void relu_forward(const T* in, int64_t n, T* out);
template <typename T>
void relu_backward(const T* dout, const T* in, int64_t n, T* din);

}  // namespace tessera::ops::cpu
