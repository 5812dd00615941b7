// The fused decode linear (decode_linear.h) with its weights brought in by bulk copies (bulk_copy.cuh,
// sm_90) instead of the register stream of decode_linear.cu. One wave of blocks (bulk_blocks_per_sm a
// SM) with the output rows split evenly over them, or blocks of bulk_rows_per_block rows. Each warp
// copies its WarpSegments share of the block's rows into shared memory (the layout of global memory)
// in `pieces` copies of whole segments, each on its own transaction barrier, all before the grid
// dependency wait, so a block's whole share is in flight at once whatever the register file holds.
// After the wait: the LayerNorm prologue (as decode_linear.cu), then each warp sums its rows from
// shared memory as each piece lands, in the order the register path sums them, and the block
// finishes its rows (decode::finish_rows). With bulk_early_trigger the block lets the next grid launch
// before its own wait. Selected by DecodeLinearArgs::bulk_blocks_per_sm (TESSERA_DECODE_BULK), for
// measuring it against the register path.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/bulk_copy.cuh"
#include "kernels/common.cuh"
#include "kernels/decode_block.cuh"
#include "kernels/decode_linear.h"
#include "kernels/decode_linear_bulk.h"
#include "kernels/programmatic_launch.cuh"

namespace tessera::kernels {

namespace {

using decode::kWarpsPerBlock;
constexpr int kMaxBlockRows = 64;  // output rows of one block (the static partial sums)
constexpr int kMaxPieces = 8;      // copies (and barriers) of a warp's share

template <typename T, int kRows, bool kLayerNorm>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    decode_linear_bulk_kernel(const T* in, const T* ln_weight, const T* ln_bias, float ln_eps, const T* weight,
                              const T* bias, int epilogue, const T* residual, int64_t n_out, int64_t k_in,
                              int rows_per_block, int pieces, bool early_trigger, T* out) {
  constexpr int kVec = 16 / sizeof(T);
  extern __shared__ __align__(128) unsigned char dynamic_shared[];  // [rows_per_block, k_in] weights, then xs
  __shared__ float partial[kMaxBlockRows][kWarpsPerBlock][kRows];
  __shared__ float red_sum[kLayerNorm ? kRows : 1][kWarpsPerBlock], red_sq[kLayerNorm ? kRows : 1][kWarpsPerBlock];
  __shared__ uint64_t arrived[kWarpsPerBlock][kMaxPieces];  // each warp's pieces' transaction barriers
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int rows_here = static_cast<int>(min(static_cast<int64_t>(rows_per_block), n_out - row0));
  T* ws = reinterpret_cast<T*>(dynamic_shared);
  const decode::WarpSegments<T> share(rows_here, k_in);
  // Piece q of the warp: its segments [begin + count q / pieces, begin + count (q + 1) / pieces).
  const auto piece_start = [&](int q) { return share.begin + share.count * q / pieces; };
  const char* src = reinterpret_cast<const char*>(weight + row0 * k_in);
  char* dst = reinterpret_cast<char*>(ws);
  if (lane < pieces) {  // no earlier kernel writes the weights: copy before the wait
    const int64_t first = share.byte_offset(piece_start(lane));
    const int64_t bytes = share.byte_offset(piece_start(lane + 1)) - first;
    if (bytes > 0) {
      uint64_t* barrier = &arrived[warp][lane];
      bulk::barrier_init(barrier);
      bulk::barrier_arm(barrier, static_cast<uint32_t>(bytes));
      bulk::copy_to_shared(dst + first, src + first, static_cast<uint32_t>(bytes), barrier);
    }
  }
  uint4 gamma = make_uint4(0, 0, 0, 0), beta = gamma;
  if constexpr (kLayerNorm) {
    if (threadIdx.x < k_in / kVec) {
      gamma = __ldg(reinterpret_cast<const uint4*>(ln_weight) + threadIdx.x);
      beta = __ldg(reinterpret_cast<const uint4*>(ln_bias) + threadIdx.x);
    }
  }
  if (early_trigger) let_next_grid_launch();  // the next grid still waits for this one's end
  wait_for_previous_grid();
  if (!early_trigger) let_next_grid_launch();
  const T* x = in;
  if constexpr (kLayerNorm) {
    T* xs = ws + static_cast<int64_t>(rows_per_block) * k_in;
    decode::layernorm_block<T, kRows>(in, gamma, beta, ln_eps, k_in, xs, red_sum, red_sq);
    x = xs;
  }
  for (int i = threadIdx.x; i < rows_here * kWarpsPerBlock * kRows; i += blockDim.x) (&partial[0][0][0])[i] = 0.0f;
  __syncthreads();
  int next_piece = 0;  // the first piece not yet waited for
  decode::shared_rows_dot<T, kRows>(ws, rows_here, k_in, x, partial, [&](int i) {
    while (next_piece < pieces && share.begin + i >= piece_start(next_piece)) {
      if (piece_start(next_piece + 1) > piece_start(next_piece)) bulk::barrier_wait(&arrived[warp][next_piece], 0);
      ++next_piece;
    }
  });
  __syncthreads();
  decode::finish_rows<T, kRows>(partial, rows_here, row0, bias, epilogue, residual, n_out, out);
}

// The GPU's SM count, compute capability major and largest opt-in shared memory of a block.
struct DeviceLimits {
  int sms = 0, major = 0, shared_optin = 0;
};
DeviceLimits device_limits() {
  static std::mutex mutex;
  static std::map<int, DeviceLimits> cache;
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(device); it != cache.end()) return it->second;
  DeviceLimits l;
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&l.major, cudaDevAttrComputeCapabilityMajor, device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&l.shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cache[device] = l;
  return l;
}

struct Plan {
  int64_t blocks = 0, rows_per_block = 0;
  size_t shared_bytes = 0;
};

// The grid and shared memory of the bulk path for these arguments, or none (blocks 0) where the path
// does not apply: off, before sm_90, more than kMaxBlockRows rows a block, or (one wave)
// bulk_blocks_per_sm blocks of the share not resident on one SM at once (with bulk_rows_per_block: one
// block not).
template <typename T, int kRows, bool kLayerNorm>
Plan plan(const DecodeLinearArgs& a) {
  Plan p;
  if (a.bulk_blocks_per_sm <= 0) return p;
  const DeviceLimits l = device_limits();
  if (l.major < 9) return p;
  const auto kernel = decode_linear_bulk_kernel<T, kRows, kLayerNorm>;
  const int64_t wave = static_cast<int64_t>(l.sms) * a.bulk_blocks_per_sm;
  const int resident = a.bulk_rows_per_block > 0 ? 1 : a.bulk_blocks_per_sm;  // blocks an SM must hold
  const int64_t rows_per_block = a.bulk_rows_per_block > 0 ? std::min<int64_t>(a.bulk_rows_per_block, a.n_out)
                                                           : (a.n_out + wave - 1) / wave;
  if (rows_per_block > kMaxBlockRows) return p;
  const size_t shared = static_cast<size_t>((rows_per_block + (kLayerNorm ? kRows : 0)) * a.k_in) * sizeof(T);
  static std::mutex mutex;
  static std::map<std::tuple<const void*, size_t, int>, bool> fits_cache;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), shared, resident);
  auto it = fits_cache.find(key);
  if (it == fits_cache.end()) {
    cudaFuncAttributes attributes{};
    TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    bool fits = shared + attributes.sharedSizeBytes <= static_cast<size_t>(l.shared_optin);
    if (fits) {
      prefer_max_shared_carveout(reinterpret_cast<const void*>(kernel));
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              l.shared_optin - static_cast<int>(attributes.sharedSizeBytes)));
      int per_sm = 0;
      TESSERA_CUDA_CHECK(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kWarpsPerBlock, shared));
      fits = per_sm >= resident;
    }
    it = fits_cache.emplace(key, fits).first;
  }
  if (!it->second) return p;
  p.rows_per_block = rows_per_block;
  p.blocks = (a.n_out + rows_per_block - 1) / rows_per_block;
  p.shared_bytes = shared;
  return p;
}

template <typename T, int kRows, bool kLayerNorm>
bool launch(const DecodeLinearArgs& a, cudaStream_t s, bool run) {
  const Plan p = plan<T, kRows, kLayerNorm>(a);
  if (p.blocks == 0) return false;
  if (!run) return true;
  const int pieces = std::clamp(a.bulk_pieces, 1, kMaxPieces);
  launch_kernel(a.programmatic, decode_linear_bulk_kernel<T, kRows, kLayerNorm>,
                dim3(static_cast<unsigned>(p.blocks)), dim3(32 * kWarpsPerBlock), p.shared_bytes, s,
                static_cast<const T*>(a.in), static_cast<const T*>(a.ln_weight), static_cast<const T*>(a.ln_bias),
                a.ln_eps, static_cast<const T*>(a.weight), static_cast<const T*>(a.bias), static_cast<int>(a.epilogue),
                static_cast<const T*>(a.residual), a.n_out, a.k_in, static_cast<int>(p.rows_per_block), pieces,
                a.bulk_early_trigger, static_cast<T*>(a.out));
  return true;
}

template <typename T, bool kLayerNorm>
bool launch_rows(const DecodeLinearArgs& a, cudaStream_t s, bool run) {
  switch (a.rows) {
    case 1: return launch<T, 1, kLayerNorm>(a, s, run);
    case 2: return launch<T, 2, kLayerNorm>(a, s, run);
    case 3: return launch<T, 3, kLayerNorm>(a, s, run);
    case 4: return launch<T, 4, kLayerNorm>(a, s, run);
    case 5: return launch<T, 5, kLayerNorm>(a, s, run);
    case 6: return launch<T, 6, kLayerNorm>(a, s, run);
    case 7: return launch<T, 7, kLayerNorm>(a, s, run);
    case 8: return launch<T, 8, kLayerNorm>(a, s, run);
    default: return false;
  }
}

template <typename T>
bool launch_type(const DecodeLinearArgs& a, cudaStream_t s, bool run) {
  return a.ln_weight ? launch_rows<T, true>(a, s, run) : launch_rows<T, false>(a, s, run);
}

bool dispatch(DType t, const DecodeLinearArgs& a, cudaStream_t s, bool run) {
  if (a.bulk_blocks_per_sm <= 0) return false;
  return t == DType::bf16 ? launch_type<__nv_bfloat16>(a, s, run) : launch_type<__half>(a, s, run);
}

}  // namespace

bool decode_linear_bulk_plans(DType t, const DecodeLinearArgs& a) { return dispatch(t, a, nullptr, false); }

bool decode_linear_bulk_forward(DType t, const DecodeLinearArgs& a, cudaStream_t s) { return dispatch(t, a, s, true); }

}  // namespace tessera::kernels
