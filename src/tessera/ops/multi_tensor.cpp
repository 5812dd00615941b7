// Multi-segment op dispatch: checks the tables against the tensors, then runs the CUDA kernels
// (cuda/multi_tensor_cuda.cpp) or the CPU reference, a loop over the segments with the per-tensor
// ops (copy, fill, scale_inplace, sum_of_squares, adamw_update), so CPU results equal theirs bitwise.
#include "tessera/ops/multi_tensor.h"

#include <algorithm>
#include <cmath>

#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/op_checks.h"

#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/multi_tensor_cuda.h"
#endif

namespace tessera::ops {

namespace {

Tensor range(const Tensor& flat, int64_t offset, int64_t count) { return flat.rows(offset, offset + count); }

void require_flat(const char* op, const Tensor& t, const char* name, int64_t extent) {
  TESSERA_CHECK(t.ndim() == 1, op, ": ", name, " must be a flat (1-D) tensor, got ", t.describe());
  TESSERA_CHECK(t.numel() >= extent, op, ": the segment table reaches element ", extent, " of ", name, " but it is ",
                t.describe());
}

void require_table_device(const char* op, const SegmentTable& table, const Tensor& t) {
  TESSERA_CHECK(table.device() == t.device(), op, ": the segment table was built for ", table.device().name(),
                " but the tensors are ", t.describe());
}

}  // namespace

SegmentTable::SegmentTable(std::vector<TensorSegment> segments, Device device)
    : segments_(std::move(segments)), device_(device) {
  for (const auto& s : segments_) {
    TESSERA_CHECK(s.numel >= 0 && s.src_offset >= 0 && s.dst_offset >= 0 && s.state_offset >= 0,
                  "SegmentTable: segment {src ", s.src_offset, ", dst ", s.dst_offset, ", state ", s.state_offset,
                  ", numel ", s.numel, "} has a negative offset or size");
    if (s.numel == 0) continue;
    if (!(s.flags & kSegmentZeroFill)) src_extent_ = std::max(src_extent_, s.src_offset + s.numel);
    dst_extent_ = std::max(dst_extent_, s.dst_offset + s.numel);
    state_extent_ = std::max(state_extent_, s.state_offset + s.numel);
  }
#ifdef TESSERA_HAVE_CUDA
  if (device_.is_cuda()) device_table_ = cuda::upload_segment_table(segments_, device_, num_chunks_);
#else
  TESSERA_CHECK(device_.is_cpu(), "SegmentTable: no CUDA backend in this build for a table on ", device_.name());
#endif
}

void segmented_convert(const Tensor& src, const Tensor& dst, const SegmentTable& table) {
  const char* op = "segmented_convert";
  require_flat(op, src, "src", table.src_extent());
  require_flat(op, dst, "dst", table.dst_extent());
  if (detail::runs_on_cuda(op, {&src, &dst})) {
    require_table_device(op, table, dst);
    return TESSERA_CUDA_OP(segmented_convert(src, dst, table));
  }
  require_table_device(op, table, dst);
  for (const auto& s : table.segments()) {
    if (s.numel == 0) continue;
    if (s.flags & kSegmentZeroFill) fill(range(dst, s.dst_offset, s.numel), 0.0);
    else copy(range(src, s.src_offset, s.numel), range(dst, s.dst_offset, s.numel));
  }
}

void segmented_grad_stats(const Tensor& grads, const SegmentTable& table, double unscale, const Tensor& stats) {
  const char* op = "segmented_grad_stats";
  require_flat(op, grads, "grads", table.src_extent());
  detail::require_dtype(op, grads, DType::f32, "grads");
  detail::require_dtype(op, stats, DType::f64, "stats");
  TESSERA_CHECK(stats.numel() == 2, op, ": stats must be f64 [2], got ", stats.describe());
  if (detail::runs_on_cuda(op, {&grads, &stats})) {
    require_table_device(op, table, grads);
    return TESSERA_CUDA_OP(segmented_grad_stats(grads, table, unscale, stats));
  }
  require_table_device(op, table, grads);
  double sum_sq = 0, nonfinite = 0;
  for (const auto& s : table.segments()) {
    const Tensor g = range(grads, s.src_offset, s.numel);
    if (unscale != 1.0) scale_inplace(g, unscale);
    const double sq = sum_of_squares(g);
    if (!std::isfinite(sq)) nonfinite += 1;
    if (s.flags & kSegmentCountedInNorm) sum_sq += sq;
  }
  stats.data_as<double>()[0] = sum_sq;
  stats.data_as<double>()[1] = nonfinite;
}

void pack_grad_stats(const Tensor& stats, const Tensor& packed) {
  const char* op = "pack_grad_stats";
  detail::require_dtype(op, stats, DType::f64, "stats");
  detail::require_dtype(op, packed, DType::f32, "packed");
  TESSERA_CHECK(stats.numel() == 2 && packed.numel() == 3, op, ": stats must be f64 [2] and packed f32 [3], got ",
                stats.describe(), " and ", packed.describe());
  if (detail::runs_on_cuda(op, {&stats, &packed})) return TESSERA_CUDA_OP(pack_grad_stats(stats, packed));
  const double sum = stats.data_as<double>()[0];
  float* v = packed.data_as<float>();
  v[0] = static_cast<float>(sum);
  v[1] = std::isfinite(sum) ? static_cast<float>(sum - static_cast<double>(v[0])) : 0.0f;
  v[2] = static_cast<float>(stats.data_as<double>()[1]);
}

void unpack_grad_stats(const Tensor& packed_on_host, double& norm_sq, bool& found_inf) {
  const char* op = "unpack_grad_stats";
  detail::require_cpu(op, {&packed_on_host});
  detail::require_dtype(op, packed_on_host, DType::f32, "packed_on_host");
  TESSERA_CHECK(packed_on_host.numel() == 3, op, ": packed stats must be f32 [3], got ", packed_on_host.describe());
  const float* v = packed_on_host.data_as<float>();
  norm_sq = static_cast<double>(v[0]) + static_cast<double>(v[1]);
  found_inf = v[2] > 0 || !std::isfinite(norm_sq);
}

void segmented_adamw(const Tensor& grads, const Tensor& params, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const Tensor& out, const SegmentTable& table, const AdamWParams& hyper, double grad_factor) {
  const char* op = "segmented_adamw";
  require_flat(op, grads, "grads", table.src_extent());
  require_flat(op, params, "params", table.state_extent());
  require_flat(op, exp_avg, "exp_avg", table.state_extent());
  require_flat(op, exp_avg_sq, "exp_avg_sq", table.state_extent());
  require_flat(op, out, "out", table.dst_extent());
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&grads, "grads"}, {&params, "params"},
                                {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}})
    detail::require_dtype(op, *t, DType::f32, name);
  TESSERA_CHECK(out.dtype() == DType::f32 || out.dtype() == DType::bf16 || out.dtype() == DType::f16, op,
                ": out must be f32, bf16 or f16, got ", out.describe());
  TESSERA_CHECK(hyper.step >= 1, op, ": step counts from 1, got ", hyper.step);
  TESSERA_CHECK(hyper.beta1 >= 0.0 && hyper.beta1 < 1.0 && hyper.beta2 >= 0.0 && hyper.beta2 < 1.0, op,
                ": beta1 and beta2 must be in [0, 1), got ", hyper.beta1, " and ", hyper.beta2);
  TESSERA_CHECK(hyper.eps > 0.0, op, ": eps must be positive, got ", hyper.eps);
  if (detail::runs_on_cuda(op, {&grads, &params, &exp_avg, &exp_avg_sq, &out})) {
    require_table_device(op, table, grads);
    return TESSERA_CUDA_OP(segmented_adamw(grads, params, exp_avg, exp_avg_sq, out, table, hyper, grad_factor));
  }
  require_table_device(op, table, grads);
  AdamWParams segment_hyper = hyper;
  for (const auto& s : table.segments()) {
    if (s.numel == 0) continue;
    const Tensor g = range(grads, s.src_offset, s.numel);
    if (grad_factor != 1.0) scale_inplace(g, grad_factor);
    segment_hyper.weight_decay = (s.flags & kSegmentWeightDecay) ? hyper.weight_decay : 0.0;
    const Tensor p = range(params, s.state_offset, s.numel);
    adamw_update(p, g, range(exp_avg, s.state_offset, s.numel), range(exp_avg_sq, s.state_offset, s.numel),
                 segment_hyper);
    copy(p, range(out, s.dst_offset, s.numel));
  }
}

}  // namespace tessera::ops
