// The CUDA side of the multi-segment ops (ops/multi_tensor.h): the one-time upload of a segment
// table (segments and their block chunks) and the launches, all on CudaContext's stream.
#pragma once
#include <vector>

#include "tessera/ops/multi_tensor.h"

namespace tessera::ops::cuda {

// Uploads segments + chunks (kernels::DeviceSegment[], kernels::DeviceChunk[]) to device; sets num_chunks.
Buffer upload_segment_table(const std::vector<TensorSegment>& segments, Device device, int64_t& num_chunks);

void segmented_convert(const Tensor& src, const Tensor& dst, const SegmentTable& table);
void segmented_grad_stats(const Tensor& grads, const SegmentTable& table, double unscale, const Tensor& stats);
void pack_grad_stats(const Tensor& stats, const Tensor& packed);
void segmented_adamw(const Tensor& grads, const Tensor& params, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const Tensor& out, const SegmentTable& table, const AdamWParams& hyper, double grad_factor);

}  // namespace tessera::ops::cuda
