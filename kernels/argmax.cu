// Greedy decoding's row reduction (ops/argmax.h): one block per row; the largest logit and its
// index (the first on ties) by a block-wide reduction, then the log-sum-exp of the row. Rows of
// 16-byte-aligned width are read as 16-byte vectors (a vocabulary row is ~100 KB: scalar loads left
// one block waiting on memory ~50 us a decode step).
#include "kernels/argmax.h"
#include "kernels/common.cuh"
#include "kernels/vec16.cuh"

namespace tessera::kernels {

namespace {
constexpr int kThreads = 1024;

template <typename T, bool kVectors>
__global__ void argmax_log_softmax_kernel(const T* logits, int64_t cols, int64_t valid, int32_t* index, float* logprob) {
  __shared__ float best_value[kThreads];
  __shared__ int64_t best_index[kThreads];
  const T* row = logits + blockIdx.x * cols;
  float value = -INFINITY;
  int64_t at = valid;  // larger than any real index: loses every tie
  constexpr int64_t kVec = 16 / sizeof(T);
  // Vectors first (columns ascending within a thread), then the tail past the last whole vector.
  const int64_t vector_end = kVectors ? valid / kVec * kVec : 0;
  for (int64_t c = threadIdx.x * kVec; c < vector_end; c += int64_t(blockDim.x) * kVec) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float x = load_f(e + k);
      if (x > value) {
        value = x;
        at = c + k;
      }
    }
  }
  for (int64_t c = vector_end + threadIdx.x; c < valid; c += blockDim.x) {
    const float x = load_f(row + c);
    if (x > value) {  // ascending: the first maximum of this thread's columns
      value = x;
      at = c;
    }
  }
  best_value[threadIdx.x] = value;
  best_index[threadIdx.x] = at;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float v = best_value[threadIdx.x + stride];
      const int64_t i = best_index[threadIdx.x + stride];
      if (v > best_value[threadIdx.x] || (v == best_value[threadIdx.x] && i < best_index[threadIdx.x])) {
        best_value[threadIdx.x] = v;
        best_index[threadIdx.x] = i;
      }
    }
    __syncthreads();
  }
  const float max_value = best_value[0];
  float local = 0.0f;
  for (int64_t c = threadIdx.x * kVec; c < vector_end; c += int64_t(blockDim.x) * kVec) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < kVec; ++k) local += __expf(load_f(e + k) - max_value);
  }
  for (int64_t c = vector_end + threadIdx.x; c < valid; c += blockDim.x) local += __expf(load_f(row + c) - max_value);
  const float sum = block_reduce<false>(local);
  if (threadIdx.x == 0) {
    index[blockIdx.x] = static_cast<int32_t>(best_index[0]);
    logprob[blockIdx.x] = -logf(sum);
  }
}
}  // namespace

void argmax_log_softmax(DType t, const void* logits, int64_t rows, int64_t cols, int64_t valid, int32_t* index,
                        float* logprob, cudaStream_t s) {
  if (rows == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T,
      const bool vectors = aligned16(logits) && cols % (16 / sizeof(T)) == 0;
      const auto kernel = vectors ? argmax_log_softmax_kernel<T, true> : argmax_log_softmax_kernel<T, false>;
      kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(static_cast<const T*>(logits), cols, valid, index,
                                                               logprob));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
