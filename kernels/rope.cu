// Rotary position embedding (Megatron / HF Llama "rotate_half" convention) in place on head vectors
// inside rows [seq, batch, row_width]: one thread per rotated pair ((i, i + rd/2), or (2i, 2i+1) when
// interleaved, over the leading rotary_dim rd of each head vector), frequencies and angles in fp32.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 256;

// sign = +1 rotates by +angle (forward), -1 by -angle (backward, the transpose of the rotation).
template <typename T>
__global__ void rope_kernel(T* rows, RopeArgs a, float sign, int64_t pairs) {
  const int64_t half = a.rotary_dim / 2;
  const int64_t vectors_per_row = a.groups * a.heads;
  const float theta = static_cast<float>(a.theta);
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p % half;
    const int64_t vector = p / half;
    const int64_t head_in_row = vector % vectors_per_row;
    const int64_t row = vector / vectors_per_row;  // = s * batch + b
    const int64_t b = row % a.batch, s = row / a.batch;
    const int64_t group = head_in_row / a.heads, head = head_in_row % a.heads;
    int32_t position = static_cast<int32_t>(s);
    if (a.positions)
      position = a.positions_per_row ? a.positions[row] : a.positions_per_batch ? a.positions[b * a.seq + s] : a.positions[s];
    const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(a.rotary_dim));
    float sin_a, cos_a;
    sincosf(static_cast<float>(position) * inv_freq, &sin_a, &cos_a);
    sin_a *= sign;
    T* x = rows + row * a.row_width + a.offset + group * a.group_stride + head * a.head_dim;
    const int64_t i1 = a.interleaved ? 2 * i : i, i2 = a.interleaved ? 2 * i + 1 : i + half;
    const float x1 = load_f(x + i1), x2 = load_f(x + i2);
    store_f(x + i1, x1 * cos_a - x2 * sin_a);
    store_f(x + i2, x2 * cos_a + x1 * sin_a);
  }
}

}  // namespace

void rope_apply(DType t, void* rows, const RopeArgs& a, bool inverse, cudaStream_t s) {
  const int64_t pairs = a.seq * a.batch * a.groups * a.heads * (a.rotary_dim / 2);
  if (pairs == 0) return;
  const unsigned blocks =
      static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((pairs + kThreads - 1) / kThreads, 132 * 32)));
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, rope_kernel<T><<<blocks, kThreads, 0, s>>>(static_cast<T*>(rows), a,
                                                                              inverse ? -1.0f : 1.0f, pairs));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
