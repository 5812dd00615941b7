// The run-ahead decode step's input update (ops/decode_inputs.h): one block; every thread reads the
// cached-token count before thread 0 advances it.
#include "kernels/common.cuh"
#include "kernels/decode_inputs.h"

namespace tessera::kernels {

namespace {
constexpr int kThreads = 128;

__global__ void advance_decode_inputs_kernel(const int32_t* next, int32_t* past, uint8_t* key_mask, int64_t rows,
                                             int64_t capacity, int32_t* ids, int32_t* positions) {
  const int64_t at = static_cast<int64_t>(*past) + 1;  // the next step's token's cache index
  for (int64_t b = threadIdx.x; b < rows; b += blockDim.x) {
    ids[b] = next[b];
    positions[b] += 1;
    if (at < capacity) key_mask[b * capacity + at] = 1;
  }
  __syncthreads();
  if (threadIdx.x == 0) *past = static_cast<int32_t>(at);
}
}  // namespace

void advance_decode_inputs(const int32_t* next, int32_t* past, uint8_t* key_mask, int64_t rows, int64_t capacity,
                           int32_t* ids, int32_t* positions, cudaStream_t s) {
  advance_decode_inputs_kernel<<<1, kThreads, 0, s>>>(next, past, key_mask, rows, capacity, ids, positions);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
