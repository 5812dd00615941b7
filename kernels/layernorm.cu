// LayerNorm forward/backward: one warp per row with fp32 statistics; the backward accumulates the
// weight/bias gradients per block in shared memory, then across blocks in an fp32 scratch, then adds
// them into dweight/dbias (f32 main grad or the activation dtype). Deterministic mode: no atomics;
// a column kernel writes per-chunk partial sums (rows of a chunk in a fixed order) to the scratch
// and the final kernel adds the chunks in chunk order (det_column_sums.cuh). Training shapes (many
// rows, 16-byte-aligned rows of up to 256 vectors) take the register path below instead, in both modes.
#include <algorithm>
#include <initializer_list>

#include "kernels/common.cuh"
#include "kernels/det_column_sums.cuh"
#include "kernels/kernels.h"
#include "kernels/vec16.cuh"

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
  return hidden % kN == 0 && hidden <= kFewRowThreads * kMaxRowVectors * kN && aligned16(in) && aligned16(weight) &&
         aligned16(bias) && aligned16(out);
}

// column_sums: [2 hidden] fp32 (dweight then dbias); shared when kShared, else global scratch directly.
// kSums false: din only (deterministic mode; the weight/bias sums come from layernorm_column_partials).
template <typename T, typename S, bool kShared, bool kSums = true>
__global__ void layernorm_backward_kernel(const T* dout, const T* in, const T* weight, const S* mean_in,
                                          const S* rstd_in, int64_t rows, int64_t hidden, T* din,
                                          const T* residual_grad, float* scratch) {
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
    const T* residual = residual_grad ? residual_grad + row * hidden : nullptr;
    for (int64_t j = lane; j < hidden; j += 32) {
      const float dyj = load_f(dy + j);  // read before din (which may alias dout) is written
      const float xhat = (load_f(x + j) - mean) * rstd;
      if (kSums) {
        atomicAdd(sums + j, dyj * xhat);
        atomicAdd(sums + hidden + j, dyj);
      }
      const float norm_grad = rstd * (dyj * load_f(weight + j) - sum_g - xhat * sum_gx);
      store_f(dx + j, residual ? norm_grad + load_f(residual + j) : norm_grad);
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

// ---- Training shapes (more than kFewRows rows, hidden a multiple of one 16-byte vector, up to 32 x 8
// vectors: 2048 bf16 / 1024 f32): one warp per row holding the row in
// registers as 16-byte vectors (lane l owns vectors l, l + 32, ...), so x and dy are read from HBM
// once. The backward's weight/bias gradients: each warp adds its rows into its own shared-memory
// slice (a lane only touches its own columns: no atomics; element k of vector v sits at
// k x vectors + v, so a warp's 32 lanes hit 32 banks), the block sums its warps in warp order
// into partial[block], and layernorm_partials_reduce_kernel sums the blocks in block order. The block
// count depends on the row count only, so the result is bitwise the same on every run (deterministic
// mode uses this path too).
constexpr int kVecWarps = 4;           // warps (rows in flight) per block
constexpr int64_t kVecMaxBlocks = 512; // partial sums per column

template <typename T>
struct Vec16 {
  static constexpr int kN = 16 / sizeof(T);
};

int64_t vec_blocks(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(kVecMaxBlocks, (rows + kVecWarps - 1) / kVecWarps));
}

template <typename T, typename S, int kMaxV>
__global__ void __launch_bounds__(32 * kVecWarps) layernorm_forward_vec_kernel(const T* in, const T* weight,
                                                                              const T* bias, float eps, int64_t rows,
                                                                              int64_t hidden, T* out, S* mean_out,
                                                                              S* rstd_out) {
  constexpr int kN = Vec16<T>::kN;
  const int lane = threadIdx.x & 31;
  const int64_t vectors = hidden / kN;
  const float inv_h = 1.0f / static_cast<float>(hidden);
  for (int64_t row = blockIdx.x * int64_t(kVecWarps) + (threadIdx.x >> 5); row < rows;
       row += int64_t(gridDim.x) * kVecWarps) {
    const uint4* x_row = reinterpret_cast<const uint4*>(in + row * hidden);
    uint4 raw[kMaxV];
#pragma unroll
    for (int u = 0; u < kMaxV; ++u)
      if (lane + 32 * u < vectors) raw[u] = x_row[lane + 32 * u];
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kMaxV; ++u)
      if (lane + 32 * u < vectors) {
        float v[kN];
        unpack16<T>(raw[u], v);
#pragma unroll
        for (int k = 0; k < kN; ++k) sum += v[k];
      }
    const float mean = warp_sum(sum) * inv_h;
    float sq = 0.0f;
#pragma unroll
    for (int u = 0; u < kMaxV; ++u)
      if (lane + 32 * u < vectors) {
        float v[kN];
        unpack16<T>(raw[u], v);
#pragma unroll
        for (int k = 0; k < kN; ++k) sq += (v[k] - mean) * (v[k] - mean);
      }
    const float rstd = rsqrtf(warp_sum(sq) * inv_h + eps);
    uint4* y_row = reinterpret_cast<uint4*>(out + row * hidden);
#pragma unroll
    for (int u = 0; u < kMaxV; ++u) {
      const int64_t vi = lane + 32 * u;
      if (vi < vectors) {
        float v[kN], w[kN], b[kN];
        unpack16<T>(raw[u], v);
        unpack16<T>(__ldg(reinterpret_cast<const uint4*>(weight) + vi), w);
        unpack16<T>(__ldg(reinterpret_cast<const uint4*>(bias) + vi), b);
        uint4 y_raw;
        T* y = reinterpret_cast<T*>(&y_raw);
#pragma unroll
        for (int k = 0; k < kN; ++k) store_f(y + k, (v[k] - mean) * rstd * w[k] + b[k]);
        y_row[vi] = y_raw;
      }
    }
    if (lane == 0) {
      store_f(mean_out + row, mean);
      store_f(rstd_out + row, rstd);
    }
  }
}

// Shared memory: kVecWarps x 2 hidden floats (each warp's dweight then dbias sums). partial: [gridDim.x][2 hidden].
// A warp requests its row's x, dy and residual gradient before using any.
template <typename T, typename S, int kMaxV>
__global__ void __launch_bounds__(32 * kVecWarps) layernorm_backward_vec_kernel(const T* dout, const T* in,
                                                                               const T* weight, const S* mean_in,
                                                                               const S* rstd_in, int64_t rows,
                                                                               int64_t hidden, T* din,
                                                                               const T* residual_grad, float* partial) {
  constexpr int kN = Vec16<T>::kN;
  extern __shared__ float warp_sums[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t j = threadIdx.x; j < kVecWarps * 2 * hidden; j += blockDim.x) warp_sums[j] = 0.0f;
  __syncthreads();
  float* my_w = warp_sums + warp * 2 * hidden;
  float* my_b = my_w + hidden;
  const int64_t vectors = hidden / kN;
  const float inv_h = 1.0f / static_cast<float>(hidden);
  for (int64_t row = blockIdx.x * int64_t(kVecWarps) + warp; row < rows; row += int64_t(gridDim.x) * kVecWarps) {
    const uint4* x_row = reinterpret_cast<const uint4*>(in + row * hidden);
    const uint4* dy_row = reinterpret_cast<const uint4*>(dout + row * hidden);
    const uint4* residual_row = residual_grad ? reinterpret_cast<const uint4*>(residual_grad + row * hidden) : nullptr;
    uint4 x_raw[kMaxV], dy_raw[kMaxV], residual_raw[kMaxV];
#pragma unroll
    for (int u = 0; u < kMaxV; ++u)
      if (lane + 32 * u < vectors) {
        x_raw[u] = x_row[lane + 32 * u];
        dy_raw[u] = dy_row[lane + 32 * u];
        if (residual_row) residual_raw[u] = residual_row[lane + 32 * u];
      }
    const float mean = load_f(mean_in + row), rstd = load_f(rstd_in + row);
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int u = 0; u < kMaxV; ++u) {
      const int64_t vi = lane + 32 * u;
      if (vi < vectors) {
        float x[kN], dy[kN], w[kN];
        unpack16<T>(x_raw[u], x);
        unpack16<T>(dy_raw[u], dy);
        unpack16<T>(__ldg(reinterpret_cast<const uint4*>(weight) + vi), w);
#pragma unroll
        for (int k = 0; k < kN; ++k) {
          const float g = dy[k] * w[k];
          sum_g += g;
          sum_gx += g * (x[k] - mean) * rstd;
        }
      }
    }
    sum_g = warp_sum(sum_g) * inv_h;
    sum_gx = warp_sum(sum_gx) * inv_h;
    uint4* dx_row = reinterpret_cast<uint4*>(din + row * hidden);  // may alias dout: this lane read its vectors
#pragma unroll
    for (int u = 0; u < kMaxV; ++u) {
      const int64_t vi = lane + 32 * u;
      if (vi < vectors) {
        float x[kN], dy[kN], w[kN];
        unpack16<T>(x_raw[u], x);
        unpack16<T>(dy_raw[u], dy);
        unpack16<T>(__ldg(reinterpret_cast<const uint4*>(weight) + vi), w);
        float residual[kN];
        if (residual_row) unpack16<T>(residual_raw[u], residual);
        uint4 dx_raw;
        T* dx = reinterpret_cast<T*>(&dx_raw);
#pragma unroll
        for (int k = 0; k < kN; ++k) {
          const float xhat = (x[k] - mean) * rstd;
          const float norm_grad = rstd * (dy[k] * w[k] - sum_g - xhat * sum_gx);
          store_f(dx + k, residual_row ? norm_grad + residual[k] : norm_grad);
          my_w[k * vectors + vi] += dy[k] * xhat;
          my_b[k * vectors + vi] += dy[k];
        }
        dx_row[vi] = dx_raw;
      }
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < 2 * hidden; j += blockDim.x) {
    const int64_t half = j < hidden ? 0 : hidden, c = j - half;  // column c of dweight or dbias
    const int64_t slot = half + (c % kN) * vectors + c / kN;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kVecWarps; ++w) total += warp_sums[w * 2 * hidden + slot];
    partial[blockIdx.x * 2 * hidden + j] = total;
  }
}

// dweight[j] += sum over blocks (fixed order) of partial[block][j]; dbias from column hidden + j. A
// block of 32 columns x 32 threads: thread y sums blocks y, y + 32, ... in order, then the 32 in order.
template <typename G>
__global__ void layernorm_partials_reduce_kernel(const float* partial, int64_t hidden, int64_t blocks, G* dweight,
                                                 G* dbias) {
  __shared__ float part[32][33];
  const int64_t j = blockIdx.x * int64_t(32) + threadIdx.x;  // column of the [2 hidden] partial rows
  float acc = 0.0f;
  if (j < 2 * hidden)
    for (int64_t b = threadIdx.y; b < blocks; b += 32) acc += partial[b * 2 * hidden + j];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < 2 * hidden) {
    float total = 0.0f;
    for (int k = 0; k < 32; ++k) total += part[k][threadIdx.x];
    G* dst = j < hidden ? dweight + j : dbias + (j - hidden);
    store_f(dst, load_f(dst) + total);
  }
}

// The vectors per lane the register path needs (0: it does not apply).
template <typename T>
int vec_path_width(int64_t rows, int64_t hidden, std::initializer_list<const void*> pointers) {
  constexpr int64_t kN = 16 / sizeof(T);
  if (rows <= kFewRows || hidden % kN != 0) return 0;
  for (const void* p : pointers)
    if (!aligned16(p)) return 0;
  const int64_t per_lane = (hidden / kN + 31) / 32;
  return per_lane <= 4 ? 4 : per_lane <= 8 ? 8 : 0;
}

size_t vec_backward_shared_bytes(int64_t hidden) { return sizeof(float) * kVecWarps * 2 * hidden; }

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
  bool done = false;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(stat_t, S, {
    const int width = vec_path_width<T>(rows, hidden, {in, weight, bias, out});
    if (width) {
      const auto kernel = width == 4 ? layernorm_forward_vec_kernel<T, S, 4> : layernorm_forward_vec_kernel<T, S, 8>;
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((rows + kVecWarps - 1) / kVecWarps, 132 * 16));
      kernel<<<blocks, 32 * kVecWarps, 0, s>>>(static_cast<const T*>(in), static_cast<const T*>(weight),
                                               static_cast<const T*>(bias), static_cast<float>(eps), rows, hidden,
                                               static_cast<T*>(out), static_cast<S*>(mean), static_cast<S*>(rstd));
      done = true;
    }
  }));
  if (done) {
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
  // Enough for the register path's per-block partials too (which path runs depends on dtype/alignment).
  return std::max<int64_t>(deterministic ? det_column_chunks(rows) : 1, vec_blocks(rows)) * 2 * hidden;
}

void layernorm_backward(DType t, const void* dout, const void* in, const void* weight, DType stat_t, const void* mean,
                        const void* rstd, int64_t rows, int64_t hidden, void* din, DType g, void* dweight, void* dbias,
                        const void* residual_grad, float* scratch, cudaStream_t s, bool deterministic) {
  if (hidden == 0) return;
  bool done = false;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(stat_t, S, {
    const int width = vec_path_width<T>(rows, hidden, {dout, in, weight, din, residual_grad});
    const size_t shared = vec_backward_shared_bytes(hidden);
    if (width && shared <= 200 * 1024) {
      const auto kernel = width == 4 ? layernorm_backward_vec_kernel<T, S, 4> : layernorm_backward_vec_kernel<T, S, 8>;
      if (shared > 48 * 1024)
        TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(shared)));
      const int64_t blocks = vec_blocks(rows);
      kernel<<<static_cast<unsigned>(blocks), 32 * kVecWarps, shared, s>>>(
          static_cast<const T*>(dout), static_cast<const T*>(in), static_cast<const T*>(weight),
          static_cast<const S*>(mean), static_cast<const S*>(rstd), rows, hidden, static_cast<T*>(din),
              static_cast<const T*>(residual_grad), scratch);
      TESSERA_KERNEL_LAUNCH_CHECK();
      TESSERA_DEVICE_FLOAT_SWITCH(g, G,
          layernorm_partials_reduce_kernel<G><<<static_cast<unsigned>((2 * hidden + 31) / 32), dim3(32, 32), 0, s>>>(
              scratch, hidden, blocks, static_cast<G*>(dweight), static_cast<G*>(dbias)));
      done = true;
    }
  }));
  if (done) {
    TESSERA_KERNEL_LAUNCH_CHECK();
    return;
  }
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
              static_cast<const S*>(mean), static_cast<const S*>(rstd), rows, hidden, static_cast<T*>(din),
              static_cast<const T*>(residual_grad), scratch)));
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
              static_cast<const S*>(mean), static_cast<const S*>(rstd), rows, hidden, static_cast<T*>(din),
              static_cast<const T*>(residual_grad), scratch);
        else
          layernorm_backward_kernel<T, S, false><<<row_blocks(rows, 2), 32 * kRowsPerBlock, 0, s>>>(
              static_cast<const T*>(dout), static_cast<const T*>(in), static_cast<const T*>(weight),
              static_cast<const S*>(mean), static_cast<const S*>(rstd), rows, hidden, static_cast<T*>(din),
              static_cast<const T*>(residual_grad), scratch)));
    TESSERA_KERNEL_LAUNCH_CHECK();
  }
  TESSERA_DEVICE_FLOAT_SWITCH(g, G, add_column_sums_kernel<G><<<static_cast<unsigned>((hidden + 255) / 256), 256, 0, s>>>(
      scratch, hidden, 1, static_cast<G*>(dweight), static_cast<G*>(dbias)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
