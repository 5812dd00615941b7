// CUDA host wrappers of the multi-segment ops: table upload (segments cut into chunks of
// kernels::kSegmentChunkElements), dtype checks and the single launch of each op on the stream.
#include "tessera/ops/cuda/multi_tensor_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/multi_tensor.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/cuda_op_checks.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda {

namespace {

cudaStream_t stream() { return CudaContext::get().stream(); }

kernels::DeviceSegmentTable device_view(const SegmentTable& table) {
  kernels::DeviceSegmentTable view;
  if (table.num_chunks() == 0) return view;
  const auto* base = static_cast<const char*>(table.device_table().data());
  view.segments = reinterpret_cast<const kernels::DeviceSegment*>(base);
  view.chunks = reinterpret_cast<const kernels::DeviceChunk*>(base + table.segments().size() *
                                                                        sizeof(kernels::DeviceSegment));
  view.num_chunks = table.num_chunks();
  return view;
}

}  // namespace

Buffer upload_segment_table(const std::vector<TensorSegment>& segments, Device device, int64_t& num_chunks) {
  static_assert(sizeof(kernels::DeviceSegment) % alignof(kernels::DeviceChunk) == 0, "chunk array alignment");
  std::vector<kernels::DeviceSegment> device_segments;
  std::vector<kernels::DeviceChunk> chunks;
  device_segments.reserve(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    const TensorSegment& s = segments[i];
    static_assert(kernels::kSegmentWeightDecay == kSegmentWeightDecay &&
                      kernels::kSegmentCountedInNorm == kSegmentCountedInNorm &&
                      kernels::kSegmentZeroFill == kSegmentZeroFill,
                  "segment flags of ops and kernels agree");
    device_segments.push_back({s.src_offset, s.dst_offset, s.state_offset, s.numel, s.flags, 0});
    for (int64_t begin = 0; begin < s.numel; begin += kernels::kSegmentChunkElements)
      chunks.push_back({begin, static_cast<int32_t>(i),
                        static_cast<int32_t>(std::min(kernels::kSegmentChunkElements, s.numel - begin))});
  }
  num_chunks = static_cast<int64_t>(chunks.size());
  if (chunks.empty()) return Buffer();
  const size_t segment_bytes = device_segments.size() * sizeof(kernels::DeviceSegment);
  const size_t chunk_bytes = chunks.size() * sizeof(kernels::DeviceChunk);
  std::vector<char> host(segment_bytes + chunk_bytes);
  std::memcpy(host.data(), device_segments.data(), segment_bytes);
  std::memcpy(host.data() + segment_bytes, chunks.data(), chunk_bytes);
  Buffer table(host.size(), device);
  // Once per table (optimizer construction): a synchronous copy ordered with the compute stream.
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(table.data(), host.data(), host.size(), cudaMemcpyHostToDevice, stream()));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return table;
}

void segmented_convert(const Tensor& src, const Tensor& dst, const SegmentTable& table) {
  const char* op = "segmented_convert";
  require_storage_dtype(op, src, "src");
  require_storage_dtype(op, dst, "dst");
  kernels::segmented_convert(device_view(table), src.dtype(), src.data(), dst.dtype(), dst.data(), stream());
}

void segmented_grad_stats(const Tensor& grads, const SegmentTable& table, double unscale, const Tensor& stats) {
  TESSERA_CUDA_CHECK(cudaMemsetAsync(stats.data(), 0, 2 * sizeof(double), stream()));
  const kernels::DeviceSegmentTable view = device_view(table);
  kernels::segmented_grad_stats(view, static_cast<float*>(grads.data()), static_cast<float>(unscale),
                                static_cast<double*>(stats.data()), stream(),
                                CudaContext::get().partials_if_deterministic(view.num_chunks));
}

void pack_grad_stats(const Tensor& stats, const Tensor& packed) {
  kernels::pack_grad_stats(static_cast<const double*>(stats.data()), static_cast<float*>(packed.data()), stream());
}

void segmented_adamw(const Tensor& grads, const Tensor& params, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const Tensor& out, const SegmentTable& table, const AdamWParams& hyper, double grad_factor) {
  kernels::SegmentedAdamWArgs args;
  args.lr = hyper.lr;
  args.beta1 = hyper.beta1;
  args.beta2 = hyper.beta2;
  args.eps = hyper.eps;
  args.decay_with_weight_decay = 1.0 - hyper.lr * hyper.weight_decay;  // as the CPU reference computes it
  args.bias_correction1 = 1.0 - std::pow(hyper.beta1, static_cast<double>(hyper.step));
  args.bias_correction2 = 1.0 - std::pow(hyper.beta2, static_cast<double>(hyper.step));
  args.grad_factor = static_cast<float>(grad_factor);
  kernels::segmented_adamw(device_view(table), static_cast<const float*>(grads.data()),
                           static_cast<float*>(params.data()), static_cast<float*>(exp_avg.data()),
                           static_cast<float*>(exp_avg_sq.data()), out.dtype(), out.data(), args, stream());
}

}  // namespace tessera::ops::cuda
