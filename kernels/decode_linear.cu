// Fused decode linear (decode_linear.h): a GEMV for up to 8 input rows (bf16/f16, fp32 accumulation)
// with (1) the output rows split evenly over one wave of blocks and each block's weights split evenly
// over its warps in 512-byte segments, every warp keeping kInFlight 16-byte loads per lane in flight,
// the first ones issued before cudaGridDependencySynchronize, so under programmatic dependent launch
// they overlap the previous kernel's tail; (2) an optional LayerNorm prologue: every block normalises
// the input rows into shared memory (one load per element, block-wide two-pass fp32 statistics,
// output rounded to the dtype) and the GEMV reads the rows from there; (3) an epilogue after bias
// (rounded to the dtype as the unfused linear's output): GeLU (tanh or erf, rounded again) or a
// residual add. Each step rounds where the unfused kernels round, so the fused layer equals the
// unfused one up to fp32 summation order.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/decode_block.cuh"
#include "kernels/decode_linear.h"
#include "kernels/kernels.h"
#include "kernels/programmatic_launch.cuh"
#include "kernels/vec16.cuh"

namespace tessera::kernels {

namespace {

using decode::kWarpsPerBlock;
constexpr int kMaxBlockRows = 64;  // output rows of one block
constexpr size_t kMaxLnShared = 48 * 1024;

// Block b takes the output rows [b R, (b + 1) R) (R = rows_per_block) and streams their weights
// through decode::WeightRowStream (the first loads before the wait for the previous grid); the block
// then adds the warps' parts of each row in warp order and applies bias and epilogue.
template <typename T, int kRows, bool kLayerNorm>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    decode_linear_kernel(const T* in, const T* ln_weight, const T* ln_bias, float ln_eps, const T* weight,
                         const T* bias, int epilogue, const T* residual, int64_t n_out, int64_t k_in,
                         int rows_per_block, T* out) {
  constexpr int kVec = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  __shared__ float partial[kMaxBlockRows][kWarpsPerBlock][kRows];
  __shared__ float red_sum[kLayerNorm ? kRows : 1][kWarpsPerBlock], red_sq[kLayerNorm ? kRows : 1][kWarpsPerBlock];
  const int vectors = static_cast<int>(k_in / kVec);  // per row
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int rows_here = static_cast<int>(min(static_cast<int64_t>(rows_per_block), n_out - row0));
  decode::WeightRowStream<T, kRows> stream;
  stream.start(weight + row0 * k_in, rows_here, k_in);
  uint4 gamma = make_uint4(0, 0, 0, 0), beta = gamma;
  if constexpr (kLayerNorm) {
    if (threadIdx.x < vectors) {
      gamma = __ldg(reinterpret_cast<const uint4*>(ln_weight) + threadIdx.x);
      beta = __ldg(reinterpret_cast<const uint4*>(ln_bias) + threadIdx.x);
    }
  }
  wait_for_previous_grid();
  let_next_grid_launch();
  const T* x = in;
  if constexpr (kLayerNorm) {
    T* xs = reinterpret_cast<T*>(dynamic_shared);
    decode::layernorm_block<T, kRows>(in, gamma, beta, ln_eps, k_in, xs, red_sum, red_sq);
    x = xs;
  }
  for (int i = threadIdx.x; i < rows_here * kWarpsPerBlock * kRows; i += blockDim.x) (&partial[0][0][0])[i] = 0.0f;
  __syncthreads();
  stream.dot(x, partial);
  __syncthreads();
  for (int i = threadIdx.x; i < rows_here * kRows; i += blockDim.x) {
    const int r = i % rows_here, m = i / rows_here;
    const int64_t n = row0 + r;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) total += partial[r][w][m];
    const float b = bias ? load_f(bias + n) : 0.0f;
    float v = decode::round_to<T>(total + b);  // the linear's output, as the unfused path stores it
    if (epilogue == static_cast<int>(DecodeEpilogue::gelu_tanh)) {
      v = decode::gelu_tanh(v);
    } else if (epilogue == static_cast<int>(DecodeEpilogue::gelu_erf)) {
      v = decode::gelu_erf(v);
    } else if (epilogue == static_cast<int>(DecodeEpilogue::residual_add)) {
      v = load_f(residual + m * n_out + n) + v;
    }
    store_f(out + m * n_out + n, v);
  }
}

template <typename T, int kRows, bool kLayerNorm>
void launch(const DecodeLinearArgs& a, cudaStream_t s) {
  const auto kernel = decode_linear_kernel<T, kRows, kLayerNorm>;
  const size_t shared_bytes = kLayerNorm ? static_cast<size_t>(kRows * a.k_in) * sizeof(T) : 0;
  // One wave of blocks (default: as many as fit on the GPU at once) with the output rows split evenly
  // over them: with a LayerNorm prologue each block normalises the input once, and the blocks stream
  // the same bytes. blocks_per_sm 0: 8 output rows a block.
  const auto [per_sm, sms] = decode::occupancy(reinterpret_cast<const void*>(kernel), shared_bytes);
  const int64_t wave = static_cast<int64_t>(sms) * (a.blocks_per_sm > 0 ? std::min(a.blocks_per_sm, per_sm) : per_sm);
  int64_t rows_per_block = a.blocks_per_sm == 0 ? 8 : (a.n_out + wave - 1) / wave;
  rows_per_block = std::min<int64_t>(rows_per_block, kMaxBlockRows);
  const int64_t blocks = (a.n_out + rows_per_block - 1) / rows_per_block;
  launch_kernel(a.programmatic, kernel, dim3(static_cast<unsigned>(blocks)), dim3(32 * kWarpsPerBlock), shared_bytes,
                s, static_cast<const T*>(a.in), static_cast<const T*>(a.ln_weight),
                static_cast<const T*>(a.ln_bias), a.ln_eps, static_cast<const T*>(a.weight),
                static_cast<const T*>(a.bias), static_cast<int>(a.epilogue), static_cast<const T*>(a.residual), a.n_out,
                a.k_in, static_cast<int>(rows_per_block), static_cast<T*>(a.out));
}

template <typename T, bool kLayerNorm>
void launch_rows(const DecodeLinearArgs& a, cudaStream_t s) {
  switch (a.rows) {
    case 1: launch<T, 1, kLayerNorm>(a, s); break;
    case 2: launch<T, 2, kLayerNorm>(a, s); break;
    case 3: launch<T, 3, kLayerNorm>(a, s); break;
    case 4: launch<T, 4, kLayerNorm>(a, s); break;
    case 5: launch<T, 5, kLayerNorm>(a, s); break;
    case 6: launch<T, 6, kLayerNorm>(a, s); break;
    case 7: launch<T, 7, kLayerNorm>(a, s); break;
    case 8: launch<T, 8, kLayerNorm>(a, s); break;
    default: TESSERA_FAIL("decode_linear_forward: rows ", a.rows, " outside 1..", kSkinnyMaxRows);
  }
}

template <typename T>
void launch_type(const DecodeLinearArgs& a, cudaStream_t s) {
  if (a.ln_weight) launch_rows<T, true>(a, s);
  else launch_rows<T, false>(a, s);
}

}  // namespace

bool decode_linear_applies(DType t, const DecodeLinearArgs& a) {
  if (!((t == DType::bf16 || t == DType::f16) && a.rows >= 1 && a.rows <= kSkinnyMaxRows && a.rows <= kWarpsPerBlock &&
        a.k_in % 8 == 0 && a.n_out >= 1 && aligned16(a.in) && aligned16(a.weight)))
    return false;
  if (a.epilogue == DecodeEpilogue::residual_add && !a.residual) return false;
  if (!a.ln_weight) return true;
  // The LayerNorm prologue: one 16-byte vector of each row per thread.
  return a.ln_bias && aligned16(a.ln_weight) && aligned16(a.ln_bias) && a.k_in <= 32 * kWarpsPerBlock * 8 &&
         static_cast<size_t>(a.rows * a.k_in) * dtype_size(t) <= kMaxLnShared;
}

void decode_linear_forward(DType t, const DecodeLinearArgs& a, cudaStream_t s) {
  TESSERA_CHECK(decode_linear_applies(t, a), "decode_linear_forward: shape, dtype or alignment it does not take (",
                dtype_name(t), ", rows ", a.rows, ", k_in ", a.k_in, ")");
  if (t == DType::bf16) launch_type<__nv_bfloat16>(a, s);
  else launch_type<__half>(a, s);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
