// CPU reference of SwiGLU on interleaved (gate, up) pairs (see ops/swiglu.h), float or double.
#pragma once
#include <cstdint>

namespace tessera::ops::cpu {

// in: pairs (gate, up) x count; out: count values.
template <typename T>
void swiglu_forward(const T* in, int64_t count, T* out);
// din: pairs (dgate, dup) x count, overwritten.
template <typename T>
void swiglu_backward(const T* dout, const T* in, int64_t count, T* din);
// GeGLU: out[j] = gelu_tanh(in[2j]) * in[2j+1].
template <typename T>
void geglu_forward(const T* in, int64_t count, T* out);
template <typename T>
void geglu_backward(const T* dout, const T* in, int64_t count, T* din);

}  // namespace tessera::ops::cpu
