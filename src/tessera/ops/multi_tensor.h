// Multi-segment ("multi-tensor") ops of the optimizer step: one call covers a whole table of element
// ranges (one CUDA launch; the CPU reference loops over the segments with the per-tensor ops).
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/adamw.h"

namespace tessera::ops {

// Segment flags (bit set).
enum SegmentFlag : uint32_t {
  kSegmentWeightDecay = 1u,    // segmented_adamw: weight decay on
  kSegmentCountedInNorm = 2u,  // segmented_grad_stats: the squares count in the norm
  kSegmentZeroFill = 4u,       // segmented_convert: zeros are written to dst, src is not read
};

// Elements [0, numel) of a segment live at src[src_offset + i], dst[dst_offset + i] and (AdamW
// state) state[state_offset + i] of the flat tensors an op is given.
struct TensorSegment {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t state_offset = 0;
  int64_t numel = 0;
  uint32_t flags = 0;
};

// A segment table, built once; on a CUDA device the segments and their block chunks are uploaded
// once at construction. Ops check every segment against the tensors' sizes through the extents.
class SegmentTable {
 public:
  SegmentTable() = default;
  SegmentTable(std::vector<TensorSegment> segments, Device device);

  const std::vector<TensorSegment>& segments() const { return segments_; }
  Device device() const { return device_; }
  bool empty() const { return segments_.empty(); }
  int64_t src_extent() const { return src_extent_; }      // max src_offset + numel (0 if none)
  int64_t dst_extent() const { return dst_extent_; }      // max dst_offset + numel
  int64_t state_extent() const { return state_extent_; }  // max state_offset + numel
  // CUDA: the uploaded table (kernels::DeviceSegment[] then kernels::DeviceChunk[]).
  const Buffer& device_table() const { return device_table_; }
  int64_t num_chunks() const { return num_chunks_; }

 private:
  std::vector<TensorSegment> segments_;
  Device device_;
  int64_t src_extent_ = 0, dst_extent_ = 0, state_extent_ = 0;
  Buffer device_table_;
  int64_t num_chunks_ = 0;
};

// dst[segment] = src[segment] converted between float dtypes (f32, bf16, f16; f64 on the CPU);
// kSegmentZeroFill segments are zeroed. src and dst: flat (1-D) tensors on the table's device.
void segmented_convert(const Tensor& src, const Tensor& dst, const SegmentTable& table);

// On f32 grads: when unscale != 1 each segment is first scaled in place by unscale (the fp16
// unscale). Then stats (f64 [2], same device) = {sum of squares of the kSegmentCountedInNorm
// segments (double accumulation), a count that is > 0 iff some segment holds a non-finite value}.
// Every segment counts in the non-finite check whatever its flags.
void segmented_grad_stats(const Tensor& grads, const SegmentTable& table, double unscale, const Tensor& stats);

// stats (f64 [2] from segmented_grad_stats) -> packed (f32 [3]: the sum's f32 high and low parts and
// the non-finite count) for an f32 all-reduce; same device. unpack_grad_stats reads the host copy.
void pack_grad_stats(const Tensor& stats, const Tensor& packed);
void unpack_grad_stats(const Tensor& packed_on_host, double& norm_sq, bool& found_inf);

// AdamW over the table: grad = grads[src] * grad_factor (fp32, the clip coefficient; the grads are
// scaled in place on the CPU, the CPU reference being scale_inplace + adamw_update), then
// ops::adamw_update's math on params/exp_avg/exp_avg_sq[state] (f32 main params and moments) with
// hyper.weight_decay on kSegmentWeightDecay segments and 0 elsewhere; the updated f32 param is then
// also written to out[dst] in out's dtype (f32, bf16, f16): the model param or the gather buffer.
void segmented_adamw(const Tensor& grads, const Tensor& params, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const Tensor& out, const SegmentTable& table, const AdamWParams& hyper, double grad_factor);

}  // namespace tessera::ops
