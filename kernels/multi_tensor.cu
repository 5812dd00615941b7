// Multi-segment kernels of the optimizer step (see multi_tensor.h): every block takes chunks of the
// table (grid-stride over chunks), each thread kUnroll elements per pass for memory-level parallelism.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/det_partials.cuh"
#include "kernels/multi_tensor.h"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

unsigned blocks_for(const DeviceSegmentTable& table) {
  return static_cast<unsigned>(std::min<int64_t>(table.num_chunks, kMaxBlocks));
}

template <typename S, typename D>
__global__ void segmented_convert_kernel(DeviceSegmentTable table, const S* __restrict__ src, D* __restrict__ dst) {
  for (int64_t c = blockIdx.x; c < table.num_chunks; c += gridDim.x) {
    const DeviceChunk chunk = table.chunks[c];
    const DeviceSegment seg = table.segments[chunk.segment];
    D* d = dst + seg.dst_offset + chunk.begin;
    const int n = chunk.numel;
    if (seg.flags & kSegmentZeroFill) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) store_f(d + i, 0.0f);
      continue;
    }
    const S* s = src + seg.src_offset + chunk.begin;
    for (int base = threadIdx.x; base < n; base += blockDim.x * kUnroll) {
      S v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (i < n) v[u] = s[i];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (i < n) {
          if constexpr (std::is_same_v<S, D>) d[i] = v[u];
          else store_f(d + i, load_f(&v[u]));
        }
      }
    }
  }
}

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block sum in double (blockDim.x a multiple of 32); the result is valid in thread 0.
__device__ __forceinline__ double block_sum_double(double v) {
  __shared__ double partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum_double(v);
  __syncthreads();  // partial may still be read from the previous chunk
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  double r = 0.0;
  if (warp == 0) r = warp_sum_double(lane < warps ? partial[lane] : 0.0);
  return r;
}

__global__ void segmented_grad_stats_kernel(DeviceSegmentTable table, float* __restrict__ grads, float unscale,
                                            double* __restrict__ stats, double* __restrict__ partials) {
  const bool rescale = unscale != 1.0f;
  for (int64_t c = blockIdx.x; c < table.num_chunks; c += gridDim.x) {
    const DeviceChunk chunk = table.chunks[c];
    const DeviceSegment seg = table.segments[chunk.segment];
    float* g = grads + seg.src_offset + chunk.begin;
    const int n = chunk.numel;
    double acc = 0.0;
    int nonfinite = 0;
    for (int base = threadIdx.x; base < n; base += blockDim.x * kUnroll) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * blockDim.x;
        v[u] = i < n ? g[i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (rescale && i < n) {
          v[u] = v[u] * unscale;
          g[i] = v[u];
        }
        if (!isfinite(v[u])) nonfinite = 1;
        const double d = static_cast<double>(v[u]);
        acc += d * d;
      }
    }
    const bool any_nonfinite = __syncthreads_or(nonfinite) != 0;
    const double sum = block_sum_double(acc);
    if (threadIdx.x == 0) {
      const double counted = (seg.flags & kSegmentCountedInNorm) ? sum : 0.0;
      if (partials) partials[c] = counted;  // deterministic mode: added in chunk order afterwards
      else if (seg.flags & kSegmentCountedInNorm) atomicAdd(stats, sum);
      if (any_nonfinite) atomicAdd(stats + 1, 1.0);
    }
  }
}

__global__ void pack_grad_stats_kernel(const double* stats, float* packed) {
  const double sum = stats[0];
  const float high = __double2float_rn(sum);
  packed[0] = high;
  packed[1] = isfinite(sum) ? __double2float_rn(sum - static_cast<double>(high)) : 0.0f;
  packed[2] = __double2float_rn(stats[1]);
}

// The CPU reference's double arithmetic, spelled with round-to-nearest intrinsics so that nvcc does
// not contract it into FMAs (the f32 results then equal the CPU's).
template <typename O>
__global__ void segmented_adamw_kernel(DeviceSegmentTable table, const float* __restrict__ grads,
                                       float* __restrict__ params, float* __restrict__ exp_avg,
                                       float* __restrict__ exp_avg_sq, O* __restrict__ out, SegmentedAdamWArgs a) {
  const double one_minus_b1 = 1.0 - a.beta1, one_minus_b2 = 1.0 - a.beta2;
  for (int64_t c = blockIdx.x; c < table.num_chunks; c += gridDim.x) {
    const DeviceChunk chunk = table.chunks[c];
    const DeviceSegment seg = table.segments[chunk.segment];
    const double decay = (seg.flags & kSegmentWeightDecay) ? a.decay_with_weight_decay : 1.0;
    const float* g = grads + seg.src_offset + chunk.begin;
    float* p = params + seg.state_offset + chunk.begin;
    float* m = exp_avg + seg.state_offset + chunk.begin;
    float* v = exp_avg_sq + seg.state_offset + chunk.begin;
    O* o = out + seg.dst_offset + chunk.begin;
    const int n = chunk.numel;
    for (int base = threadIdx.x; base < n; base += blockDim.x * kUnroll) {
      float gv[kUnroll], pv[kUnroll], mv[kUnroll], vv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (i < n) {
          gv[u] = g[i];
          pv[u] = p[i];
          mv[u] = m[i];
          vv[u] = v[i];
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (i >= n) continue;
        const double gd = static_cast<double>(gv[u] * a.grad_factor);
        const double mi = __dadd_rn(__dmul_rn(a.beta1, static_cast<double>(mv[u])), __dmul_rn(one_minus_b1, gd));
        const double vi =
            __dadd_rn(__dmul_rn(a.beta2, static_cast<double>(vv[u])), __dmul_rn(__dmul_rn(one_minus_b2, gd), gd));
        double pd = __dmul_rn(static_cast<double>(pv[u]), decay);
        const double denom = __dadd_rn(__dsqrt_rn(__ddiv_rn(vi, a.bias_correction2)), a.eps);
        pd = __dadd_rn(pd, -__ddiv_rn(__dmul_rn(a.lr, __ddiv_rn(mi, a.bias_correction1)), denom));
        const float pf = __double2float_rn(pd);
        m[i] = __double2float_rn(mi);
        v[i] = __double2float_rn(vi);
        p[i] = pf;
        store_f(o + i, pf);
      }
    }
  }
}

}  // namespace

void segmented_convert(const DeviceSegmentTable& table, DType src_t, const void* src, DType dst_t, void* dst,
                       cudaStream_t s) {
  if (table.num_chunks == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(src_t, S, TESSERA_DEVICE_FLOAT_SWITCH(dst_t, D,
      segmented_convert_kernel<S, D><<<blocks_for(table), kThreads, 0, s>>>(table, static_cast<const S*>(src),
                                                                             static_cast<D*>(dst))));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void segmented_grad_stats(const DeviceSegmentTable& table, float* grads, float unscale, double* stats,
                          cudaStream_t s, double* partials) {
  if (table.num_chunks == 0) return;
  segmented_grad_stats_kernel<<<blocks_for(table), kThreads, 0, s>>>(table, grads, unscale, stats, partials);
  TESSERA_KERNEL_LAUNCH_CHECK();
  if (partials) add_partials_in_order(partials, table.num_chunks, stats, s);
}

void pack_grad_stats(const double* stats, float* packed, cudaStream_t s) {
  pack_grad_stats_kernel<<<1, 1, 0, s>>>(stats, packed);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void segmented_adamw(const DeviceSegmentTable& table, const float* grads, float* params, float* exp_avg,
                     float* exp_avg_sq, DType out_t, void* out, const SegmentedAdamWArgs& args, cudaStream_t s) {
  if (table.num_chunks == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(out_t, O,
      segmented_adamw_kernel<O><<<blocks_for(table), kThreads, 0, s>>>(table, grads, params, exp_avg, exp_avg_sq,
                                                                        static_cast<O*>(out), args));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
