// LayerNorm forward/backward: one warp per row with fp32 statistics; the backward accumulates the
// weight/bias gradients per block in shared memory, then across blocks in an fp32 scratch, then adds
// them into dweight/dbias (f32 main grad or the activation dtype). Deterministic mode: no atomics;
// a column kernel writes per-chunk partial sums (rows of a chunk in a fixed order) to the scratch
// and the final kernel adds the chunks in chunk order (det_column_sums.cuh).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/det_column_sums.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block

template <typename T, typename S>
__global__ void layernorm_forward_kernel(const T* in, const T* weight, const T* bias, float eps, int64_t rows,
                                         int64_t hidden, T* out, S* mean_out, S* rstd_out) {
  const int lane = threadIdx.x & 31;
  for (int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5); row < rows;
       row += int64_t(gridDim.x) * kRowsPerBlock) {
    const T* x = in + row * hidden;
    float sum = 0.0f;
    for (int64_t j = lane; j < hidden; j += 32) sum += load_f(x + j);
    const float mean = warp_sum(sum) / static_cast<float>(hidden);
    float sq = 0.0f;
    for (int64_t j = lane; j < hidden; j += 32) {
      const float d = load_f(x + j) - mean;
      sq += d * d;
    }
    const float rstd = rsqrtf(warp_sum(sq) / static_cast<float>(hidden) + eps);
    T* y = out + row * hidden;
    for (int64_t j = lane; j < hidden; j += 32)
      store_f(y + j, (load_f(x + j) - mean) * rstd * load_f(weight + j) + load_f(bias + j));
    if (lane == 0) {
      store_f(mean_out + row, mean);
      store_f(rstd_out + row, rstd);
    }
  }
}

// Few rows (generation: one row per sequence): one block per row, so a row's reads spread over
// kFewRowThreads threads instead of one warp; the same two-pass statistics.
constexpr int kFewRowThreads = 256;
constexpr int64_t kFewRows = 256;  // at most this many rows take the block-per-row kernel

template <typename T, typename S>
__global__ void layernorm_forward_few_rows_kernel(const T* in, const T* weight, const T* bias, float eps,
                                                  int64_t hidden, T* out, S* mean_out, S* rstd_out) {
  const int64_t row = blockIdx.x;
  const T* x = in + row * hidden;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) sum += load_f(x + j);
  const float mean = block_reduce<false>(sum) / static_cast<float>(hidden);
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float d = load_f(x + j) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(block_reduce<false>(sq) / static_cast<float>(hidden) + eps);
  T* y = out + row * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x)
    store_f(y + j, (load_f(x + j) - mean) * rstd * load_f(weight + j) + load_f(bias + j));
  if (threadIdx.x == 0) {
    store_f(mean_out + row, mean);
    store_f(rstd_out + row, rstd);
  }
}

// The same for rows that fit in registers as 16-byte vectors (hidden <= kFewRowThreads x 4 vectors,
// e.g. 8192 in bf16): every load of the row, weight and bias is issued at the start, so the kernel
// waits for memory once instead of once per pass.
constexpr int kMaxRowVectors = 4;

template <typename T>
struct RowVectors {
  static constexpr int kN = 16 / sizeof(T);
  float v[kMaxRowVectors][kN];
};

template <typename T>
__device__ __forceinline__ void unpack16(const uint4& raw, float* out) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < 16 / static_cast<int>(sizeof(T)); ++k) out[k] = load_f(e + k);
}

template <typename T, typename S>
__global__ void layernorm_forward_row_vectors_kernel(const T* in, const T* weight, const T* bias, float eps,
                                                     int64_t hidden, T* out, S* mean_out, S* rstd_out) {
  constexpr int kN = RowVectors<T>::kN;
  const int64_t row = blockIdx.x, vectors = hidden / kN;
  const T* x_row = in + row * hidden;
  uint4 x_raw[kMaxRowVectors], w_raw[kMaxRowVectors], b_raw[kMaxRowVectors];
#pragma unroll
  for (int u = 0; u < kMaxRowVectors; ++u) {
    const int64_t v = threadIdx.x + int64_t(u) * blockDim.x;
    if (v < vectors) {
      x_raw[u] = *reinterpret_cast<const uint4*>(x_row + v * kN);
      w_raw[u] = __ldg(reinterpret_cast<const uint4*>(weight + v * kN));
      b_raw[u] = __ldg(reinterpret_cast<const uint4*>(bias + v * kN));
    }
  }
  RowVectors<T> x;
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < kMaxRowVectors; ++u)
    if (threadIdx.x + int64_t(u) * blockDim.x < vectors) {
      unpack16<T>(x_raw[u], x.v[u]);
#pragma unroll
      for (int k = 0; k < kN; ++k) sum += x.v[u][k];
    }
  const float mean = block_reduce<false>(sum) / static_cast<float>(hidden);
  float sq = 0.0f;
#pragma unroll
  for (int u = 0; u < kMaxRowVectors; ++u)
    if (threadIdx.x + int64_t(u) * blockDim.x < vectors)
#pragma unroll
      for (int k = 0; k < kN; ++k) sq += (x.v[u][k] - mean) * (x.v[u][k] - mean);
  const float rstd = rsqrtf(block_reduce<false>(sq) / static_cast<float>(hidden) + eps);
  T* y_row = out + row * hidden;
#pragma unroll
  for (int u = 0; u < kMaxRowVectors; ++u) {
    const int64_t v = threadIdx.x + int64_t(u) * blockDim.x;
    if (v < vectors) {
      float w[kN], b[kN];
      unpack16<T>(w_raw[u], w);
      unpack16<T>(b_raw[u], b);
      uint4 y_raw;
      T* y = reinterpret_cast<T*>(&y_raw);
#pragma unroll
      for (int k = 0; k < kN; ++k) store_f(y + k, (x.v[u][k] - mean) * rstd * w[k] + b[k]);
      *reinterpret_cast<uint4*>(y_row + v * kN) = y_raw;
    }
  }
  if (threadIdx.x == 0) {
    store_f(mean_out + row, mean);
    store_f(rstd_out + row, rstd);
  }
}

template <typename T>
bool row_vectors_fit(int64_t hidden, const void* in, const void* weight, const void* bias, const void* out) {
  constexpr int64_t kN = 16 / sizeof(T);
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return hidden % kN == 0 && hidden <= kFewRowThreads * kMaxRowVectors * kN && aligned(in) && aligned(weight) &&
         aligned(bias) && aligned(out);
}

// column_sums: [2 hidden] fp32 (dweight then dbias); shared when kShared, else global scratch directly.
// kSums false: din only (deterministic mode; the weight/bias sums come from layernorm_column_partials).
template <typename T, typename S, bool kShared, bool kSums = true>
__global__ void layernorm_backward_kernel(const T* dout, const T* in, const T* weight, const S* mean_in,
                                          const S* rstd_in, int64_t rows, int64_t hidden, T* din, float* scratch) {
  extern __shared__ float shared_sums[];
  float* sums = kShared ? shared_sums : scratch;
  if (kShared) {
    for (int64_t j = threadIdx.x; j < 2 * hidden; j += blockDim.x) shared_sums[j] = 0.0f;
    __syncthreads();
  }
  const int lane = threadIdx.x & 31;
  const float inv_h = 1.0f / static_cast<float>(hidden);
  for (int64_t row = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5); row < rows;
       row += int64_t(gridDim.x) * kRowsPerBlock) {
    const T* x = in + row * hidden;
    const T* dy = dout + row * hidden;
    const float mean = load_f(mean_in + row), rstd = load_f(rstd_in + row);
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t j = lane; j < hidden; j += 32) {
      const float g = load_f(dy + j) * load_f(weight + j);
      sum_g += g;
      sum_gx += g * (load_f(x + j) - mean) * rstd;
    }
    sum_g = warp_sum(sum_g) * inv_h;
    sum_gx = warp_sum(sum_gx) * inv_h;
    T* dx = din + row * hidden;
    for (int64_t j = lane; j < hidden; j += 32) {
      const float dyj = load_f(dy + j);  // read before din (which may alias dout) is written
      const float xhat = (load_f(x + j) - mean) * rstd;
      if (kSums) {
        atomicAdd(sums + j, dyj * xhat);
        atomicAdd(sums + hidden + j, dyj);
      }
      store_f(dx + j, rstd * (dyj * load_f(weight + j) - sum_g - xhat * sum_gx));
    }
  }
  if (kShared && kSums) {
    __syncthreads();
    for (int64_t j = threadIdx.x; j < 2 * hidden; j += blockDim.x) atomicAdd(scratch + j, shared_sums[j]);
  }
}

// Deterministic mode: partial[chunk][j] = sum of dy xhat, partial[chunk][hidden + j] = sum of dy over
// the chunk's rows, each thread's rows in increasing order, the kDetRowThreads threads of a column
// summed in thread order.
template <typename T, typename S>
__global__ void layernorm_column_partials_kernel(const T* dout, const T* in, const S* mean_in, const S* rstd_in,
                                                 int64_t rows, int64_t hidden, int64_t chunk_rows, float* partial) {
  __shared__ float part_w[kDetRowThreads][33], part_b[kDetRowThreads][33];
  const int64_t j = blockIdx.x * int64_t(32) + threadIdx.x;
  const int64_t begin = blockIdx.y * chunk_rows, end = min(rows, begin + chunk_rows);
  float acc_w = 0.0f, acc_b = 0.0f;
  if (j < hidden)
    for (int64_t row = begin + threadIdx.y; row < end; row += kDetRowThreads) {
      const float dyj = load_f(dout + row * hidden + j);
      const float xhat = (load_f(in + row * hidden + j) - load_f(mean_in + row)) * load_f(rstd_in + row);
      acc_w += dyj * xhat;
      acc_b += dyj;
    }
  part_w[threadIdx.y][threadIdx.x] = acc_w;
  part_b[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && j < hidden) {
    float w = 0.0f, b = 0.0f;
    for (int k = 0; k < kDetRowThreads; ++k) {
      w += part_w[k][threadIdx.x];
      b += part_b[k][threadIdx.x];
    }
    partial[blockIdx.y * 2 * hidden + j] = w;
    partial[blockIdx.y * 2 * hidden + hidden + j] = b;
  }
}

// dweight[j] += sum over chunks (in order) of scratch[chunk][j]; dbias from scratch[chunk][hidden + j].
template <typename G>
__global__ void add_column_sums_kernel(const float* scratch, int64_t hidden, int64_t chunks, G* dweight, G* dbias) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < hidden; j += int64_t(gridDim.x) * blockDim.x) {
    float w = scratch[j], b = scratch[hidden + j];
    for (int64_t c = 1; c < chunks; ++c) {
      w += scratch[c * 2 * hidden + j];
      b += scratch[c * 2 * hidden + hidden + j];
    }
    store_f(dweight + j, load_f(dweight + j) + w);
    store_f(dbias + j, load_f(dbias + j) + b);
  }
}

unsigned row_blocks(int64_t rows, int64_t per_sm) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 132 * per_sm)));
}

}  // namespace

void layernorm_forward(DType t, const void* in, const void* weight, const void* bias, double eps, int64_t rows,
                       int64_t hidden, void* out, DType stat_t, void* mean, void* rstd, cudaStream_t s) {
  if (rows == 0) return;
  if (rows <= kFewRows && hidden >= 2 * kFewRowThreads) {
    TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(stat_t, S,
        const auto kernel = row_vectors_fit<T>(hidden, in, weight, bias, out)
                                ? layernorm_forward_row_vectors_kernel<T, S>
                                : layernorm_forward_few_rows_kernel<T, S>;
        kernel<<<static_cast<unsigned>(rows), kFewRowThreads, 0, s>>>(
            static_cast<const T*>(in), static_cast<const T*>(weight), static_cast<const T*>(bias),
            static_cast<float>(eps), hidden, static_cast<T*>(out), static_cast<S*>(mean), static_cast<S*>(rstd))));
    TESSERA_KERNEL_LAUNCH_CHECK();
    return;
  }
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(stat_t, S,
      layernorm_forward_kernel<T, S><<<row_blocks(rows, 16), 32 * kRowsPerBlock, 0, s>>>(
          static_cast<const T*>(in), static_cast<const T*>(weight), static_cast<const T*>(bias),
          static_cast<float>(eps), rows, hidden, static_cast<T*>(out), static_cast<S*>(mean), static_cast<S*>(rstd))));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

int64_t layernorm_backward_scratch_floats(int64_t rows, int64_t hidden, bool deterministic) {
  return (deterministic ? det_column_chunks(rows) : 1) * 2 * hidden;
}

void layernorm_backward(DType t, const void* dout, const void* in, const void* weight, DType stat_t, const void* mean,
                        const void* rstd, int64_t rows, int64_t hidden, void* din, DType g, void* dweight, void* dbias,
                        float* scratch, cudaStream_t s, bool deterministic) {
  if (hidden == 0) return;
  if (deterministic) {
    // The column sums read dout before din (which may alias it) is written.
    const int64_t chunks = det_column_chunks(rows), chunk_rows = det_chunk_rows(rows);
    if (rows > 0) {
      TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(stat_t, S,
          layernorm_column_partials_kernel<T, S><<<det_column_grid(hidden, rows), dim3(32, kDetRowThreads), 0, s>>>(
              static_cast<const T*>(dout), static_cast<const T*>(in), static_cast<const S*>(mean),
              static_cast<const S*>(rstd), rows, hidden, chunk_rows, scratch);
          layernorm_backward_kernel<T, S, false, false><<<row_blocks(rows, 2), 32 * kRowsPerBlock, 0, s>>>(
              static_cast<const T*>(dout), static_cast<const T*>(in), static_cast<const T*>(weight),
              static_cast<const S*>(mean), static_cast<const S*>(rstd), rows, hidden, static_cast<T*>(din), scratch)));
      TESSERA_KERNEL_LAUNCH_CHECK();
    } else {
      TESSERA_CUDA_CHECK(cudaMemsetAsync(scratch, 0, sizeof(float) * 2 * hidden, s));
    }
    TESSERA_DEVICE_FLOAT_SWITCH(g, G, add_column_sums_kernel<G><<<static_cast<unsigned>((hidden + 255) / 256), 256, 0, s>>>(
        scratch, hidden, rows > 0 ? chunks : 1, static_cast<G*>(dweight), static_cast<G*>(dbias)));
    TESSERA_KERNEL_LAUNCH_CHECK();
    return;
  }
  TESSERA_CUDA_CHECK(cudaMemsetAsync(scratch, 0, sizeof(float) * 2 * hidden, s));
  if (rows > 0) {
    const size_t shared_bytes = sizeof(float) * 2 * hidden;
    const bool use_shared = shared_bytes <= 48 * 1024;
    TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(stat_t, S,
        if (use_shared)
          layernorm_backward_kernel<T, S, true><<<row_blocks(rows, 2), 32 * kRowsPerBlock, shared_bytes, s>>>(
              static_cast<const T*>(dout), static_cast<const T*>(in), static_cast<const T*>(weight),
              static_cast<const S*>(mean), static_cast<const S*>(rstd), rows, hidden, static_cast<T*>(din), scratch);
        else
          layernorm_backward_kernel<T, S, false><<<row_blocks(rows, 2), 32 * kRowsPerBlock, 0, s>>>(
              static_cast<const T*>(dout), static_cast<const T*>(in), static_cast<const T*>(weight),
              static_cast<const S*>(mean), static_cast<const S*>(rstd), rows, hidden, static_cast<T*>(din), scratch)));
    TESSERA_KERNEL_LAUNCH_CHECK();
  }
  TESSERA_DEVICE_FLOAT_SWITCH(g, G, add_column_sums_kernel<G><<<static_cast<unsigned>((hidden + 255) / 256), 256, 0, s>>>(
      scratch, hidden, 1, static_cast<G*>(dweight), static_cast<G*>(dbias)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
