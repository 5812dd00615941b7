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

// Adds g (scaled in place first when rescale) into the thread's sum of squares and non-finite flag.
__device__ __forceinline__ void add_square(float& g, bool rescale, float unscale, double& acc, int& nonfinite) {
  if (rescale) g = g * unscale;
  if (!isfinite(g)) nonfinite = 1;
  const double d = static_cast<double>(g);
  acc += d * d;
}

// A block per chunk; chunks whose grads are 16-byte aligned move float4s (kUnroll in flight per
// thread), the others and a chunk's last numel % 4 elements go one by one.
__global__ void segmented_grad_stats_kernel(DeviceSegmentTable table, float* __restrict__ grads, float unscale,
                                            double* __restrict__ stats, double* __restrict__ partials) {
  const bool rescale = unscale != 1.0f;
  for (int64_t c = blockIdx.x; c < table.num_chunks; c += gridDim.x) {
    const DeviceChunk chunk = table.chunks[c];
    const DeviceSegment seg = table.segments[chunk.segment];
    float* g = grads + seg.src_offset + chunk.begin;
    const int n = chunk.numel;
    const int n4 = reinterpret_cast<uintptr_t>(g) % 16 == 0 ? n / 4 : 0;
    double acc = 0.0;
    int nonfinite = 0;
    for (int base = threadIdx.x; base < n4; base += blockDim.x * kUnroll) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (i < n4) v[u] = reinterpret_cast<const float4*>(g)[i];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (i >= n4) continue;
        add_square(v[u].x, rescale, unscale, acc, nonfinite);
        add_square(v[u].y, rescale, unscale, acc, nonfinite);
        add_square(v[u].z, rescale, unscale, acc, nonfinite);
        add_square(v[u].w, rescale, unscale, acc, nonfinite);
        if (rescale) reinterpret_cast<float4*>(g)[i] = v[u];
      }
    }
    for (int i = 4 * n4 + threadIdx.x; i < n; i += blockDim.x) {
      float v = g[i];
      add_square(v, rescale, unscale, acc, nonfinite);
      if (rescale) g[i] = v;
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

// One element's AdamW update in fp32. The CPU reference (ops::adamw_update) computes in double; the
// results agree within an ulp or two (gpu_multi_tensor_parity: 1e-6 of the largest value). The
// double arithmetic, same memory access, ran a 124M step 0.3-0.7% slower (docs/training-performance.md).
struct AdamWElement {
  float beta1, beta2, one_minus_b1, one_minus_b2, lr, eps, bc1, bc2, grad_factor;

  __device__ explicit AdamWElement(const SegmentedAdamWArgs& a)
      : beta1(float(a.beta1)), beta2(float(a.beta2)), one_minus_b1(float(1.0 - a.beta1)),
        one_minus_b2(float(1.0 - a.beta2)), lr(float(a.lr)), eps(float(a.eps)), bc1(float(a.bias_correction1)),
        bc2(float(a.bias_correction2)), grad_factor(a.grad_factor) {}

  // p, m, v updated in place from grad g; decay = 1 - lr * weight_decay (or 1).
  __device__ __forceinline__ void operator()(float g, float& p, float& m, float& v, float decay) const {
    const float gf = g * grad_factor;
    const float mi = beta1 * m + one_minus_b1 * gf;
    const float vi = beta2 * v + one_minus_b2 * gf * gf;
    const float denom = sqrtf(vi / bc2) + eps;
    p = p * decay - lr * (mi / bc1) / denom;
    m = mi;
    v = vi;
  }
};

// Four consecutive model-dtype values stored as one unit (16 bytes for f32, 8 for bf16 / f16).
template <typename O>
struct alignas(4 * sizeof(O)) Out4 {
  O e[4];
};

constexpr int kAdamWUnroll = 2;  // float4s in flight per array and thread (three blocks an SM)

// A block per chunk. Chunks whose five pointers allow it move float4s (kAdamWUnroll in flight per
// array and thread before any is used); the others, and a chunk's last numel % 4 elements, go one by one.
template <typename O>
__global__ void __launch_bounds__(kThreads, 3)
    segmented_adamw_kernel(DeviceSegmentTable table, const float* __restrict__ grads, float* __restrict__ params,
                           float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq, O* __restrict__ out,
                           SegmentedAdamWArgs a) {
  const AdamWElement update(a);
  for (int64_t c = blockIdx.x; c < table.num_chunks; c += gridDim.x) {
    const DeviceChunk chunk = table.chunks[c];
    const DeviceSegment seg = table.segments[chunk.segment];
    const float decay = float((seg.flags & kSegmentWeightDecay) ? a.decay_with_weight_decay : 1.0);
    const float* g = grads + seg.src_offset + chunk.begin;
    float* p = params + seg.state_offset + chunk.begin;
    float* m = exp_avg + seg.state_offset + chunk.begin;
    float* v = exp_avg_sq + seg.state_offset + chunk.begin;
    O* o = out + seg.dst_offset + chunk.begin;
    const int n = chunk.numel;
    const bool vectors = (reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(p) |
                          reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(o) % (4 * sizeof(O)) == 0;
    const int n4 = vectors ? n / 4 : 0;
    for (int base = threadIdx.x; base < n4; base += blockDim.x * kAdamWUnroll) {
      float4 gv[kAdamWUnroll], pv[kAdamWUnroll], mv[kAdamWUnroll], vv[kAdamWUnroll];
#pragma unroll
      for (int u = 0; u < kAdamWUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (i < n4) {
          gv[u] = reinterpret_cast<const float4*>(g)[i];
          pv[u] = reinterpret_cast<const float4*>(p)[i];
          mv[u] = reinterpret_cast<const float4*>(m)[i];
          vv[u] = reinterpret_cast<const float4*>(v)[i];
        }
      }
#pragma unroll
      for (int u = 0; u < kAdamWUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (i >= n4) continue;
        update(gv[u].x, pv[u].x, mv[u].x, vv[u].x, decay);
        update(gv[u].y, pv[u].y, mv[u].y, vv[u].y, decay);
        update(gv[u].z, pv[u].z, mv[u].z, vv[u].z, decay);
        update(gv[u].w, pv[u].w, mv[u].w, vv[u].w, decay);
        reinterpret_cast<float4*>(p)[i] = pv[u];
        reinterpret_cast<float4*>(m)[i] = mv[u];
        reinterpret_cast<float4*>(v)[i] = vv[u];
        Out4<O> ov;
        store_f(&ov.e[0], pv[u].x);
        store_f(&ov.e[1], pv[u].y);
        store_f(&ov.e[2], pv[u].z);
        store_f(&ov.e[3], pv[u].w);
        reinterpret_cast<Out4<O>*>(o)[i] = ov;
      }
    }
    for (int i = 4 * n4 + threadIdx.x; i < n; i += blockDim.x) {
      float pi = p[i], mi = m[i], vi = v[i];
      update(g[i], pi, mi, vi, decay);
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
      store_f(o + i, pi);
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
