// Multi-segment ("multi-tensor") CUDA kernels of the optimizer step: one launch covers every
// segment of a table (segmented convert/copy, gradient statistics, fused AdamW + model-dtype write).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels {

// Flags of a segment (bit set).
constexpr uint32_t kSegmentWeightDecay = 1u;     // AdamW applies weight decay to the segment
constexpr uint32_t kSegmentCountedInNorm = 2u;   // the segment's squares count in the grad norm
constexpr uint32_t kSegmentZeroFill = 4u;        // convert: write zeros to dst, read no src

// One element range: src[src_offset + i], dst[dst_offset + i], state[state_offset + i], i < numel.
struct DeviceSegment {
  int64_t src_offset;
  int64_t dst_offset;
  int64_t state_offset;
  int64_t numel;
  uint32_t flags;
  uint32_t reserved;
};

// The unit of work of one block: elements [begin, begin + numel) of one segment. Segments are cut
// into chunks of at most kSegmentChunkElements, so a huge segment spreads over many blocks and a
// tiny one costs a single block.
struct DeviceChunk {
  int64_t begin;
  int32_t segment;
  int32_t numel;
};
constexpr int64_t kSegmentChunkElements = 16384;

// A segment table on the device: segments then chunks, both device pointers.
struct DeviceSegmentTable {
  const DeviceSegment* segments = nullptr;
  const DeviceChunk* chunks = nullptr;
  int64_t num_chunks = 0;
};

// dst = convert(src) per segment (dtypes f32, bf16, f16; equal dtypes copy); kSegmentZeroFill
// segments write zeros.
void segmented_convert(const DeviceSegmentTable& table, DType src_t, const void* src, DType dst_t, void* dst,
                       cudaStream_t s);

// On f32 grads: when unscale != 1 every segment is first scaled in place (g = g * unscale in fp32);
// then stats[0] += sum of g^2 over kSegmentCountedInNorm segments (double accumulation) and
// stats[1] += the number of chunks holding a non-finite value (any segment). stats: 2 device doubles.
// partials (table.num_chunks device doubles) or null: deterministic mode, each chunk's sum written to
// partials[chunk] and added to stats[0] in chunk order by a second kernel (the non-finite count adds
// exact integers, so its atomics are order-independent) or the atomic path.
void segmented_grad_stats(const DeviceSegmentTable& table, float* grads, float unscale, double* stats,
                          cudaStream_t s, double* partials = nullptr);

// {sum, nonfinite} (device doubles) -> {f32 high part, f32 low part, f32 nonfinite} for an f32 all-reduce.
void pack_grad_stats(const double* stats, float* packed, cudaStream_t s);

struct SegmentedAdamWArgs {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0;
  double decay_with_weight_decay = 1;  // 1 - lr * weight_decay (segments with kSegmentWeightDecay)
  double bias_correction1 = 1, bias_correction2 = 1;
  float grad_factor = 1;               // grad = grad * grad_factor in fp32 first (clip coefficient)
};

// AdamW (ops::adamw_update's CPU reference computed in fp32) on f32 main params and moments at
// state_offset with the f32 grads at src_offset; the updated param is also written in out_t
// (f32, bf16, f16) at dst_offset of out.
void segmented_adamw(const DeviceSegmentTable& table, const float* grads, float* params, float* exp_avg,
                     float* exp_avg_sq, DType out_t, void* out, const SegmentedAdamWArgs& args, cudaStream_t s);

}  // namespace tessera::kernels
