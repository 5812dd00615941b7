// 16-byte vector access: aligned16 (host side), and for elementwise kernels "packs": a pack is the
// 16 / sizeof(T) consecutive elements at pack index p (elements p N .. p N + N - 1), loaded/stored as
// one uint4 and converted to/from fp32.
// A kernel takes the pack path only when vec16_fits says every pointer is 16-byte aligned and the
// element count (and the bias period) is a multiple of N; otherwise it keeps its scalar loop.
#pragma once
#include <initializer_list>

#include "kernels/common.cuh"

namespace tessera::kernels {

template <typename T>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

template <typename T>
__device__ __forceinline__ void load_pack(const T* base, int64_t pack, float* out) {
  const uint4 raw = reinterpret_cast<const uint4*>(base)[pack];
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec16<T>; ++k) out[k] = load_f(e + k);
}

template <typename T>
__device__ __forceinline__ void store_pack(T* base, int64_t pack, const float* in) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec16<T>; ++k) store_f(e + k, in[k]);
  reinterpret_cast<uint4*>(base)[pack] = raw;
}

// Host side: whether a pointer allows 16-byte vector loads and stores.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Host side: n (and period, when nonzero) multiples of N and every non-null pointer 16-byte aligned.
template <typename T>
inline bool vec16_fits(int64_t n, int64_t period, std::initializer_list<const void*> pointers) {
  if (n % kVec16<T> != 0 || (period != 0 && period % kVec16<T> != 0)) return false;
  for (const void* p : pointers)
    if (p && !aligned16(p)) return false;
  return true;
}

}  // namespace tessera::kernels
