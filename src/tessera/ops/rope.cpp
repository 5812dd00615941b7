// Rotary position embedding dispatch: checks the row layout, head selection and positions, then runs
// the CPU reference (cpu/rope.h) or the CUDA op (cuda/fused_ops_cuda.h).
#include "tessera/ops/rope.h"

#include "tessera/ops/cpu/rope.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/op_checks.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/fused_ops_cuda.h"
#endif

namespace tessera::ops {

namespace detail {
void check_rope_rows(const char* op, const Tensor& rows, const RopeHeads& h, const Tensor& positions, double theta) {
  require_defined(op, rows, "rows");
  if (rows.ndim() != 3) TESSERA_FAIL(op, ": rows must be [s, b, row_width], got ", rows.describe());
  TESSERA_CHECK(theta > 0.0, op, ": theta (rotary base) must be > 0, got ", theta);
  TESSERA_CHECK(h.head_dim > 0 && h.head_dim % 2 == 0, op, ": head_dim must be positive and even, got ", h.head_dim);
  TESSERA_CHECK(h.rotary_dim == 0 || (h.rotary_dim > 0 && h.rotary_dim % 2 == 0 && h.rotary_dim <= h.head_dim), op,
                ": rotary_dim must be even and in [2, head_dim = ", h.head_dim, "] (0: head_dim), got ", h.rotary_dim);
  TESSERA_CHECK(h.heads > 0 && h.groups > 0, op, ": heads and groups must be positive, got heads ", h.heads,
                ", groups ", h.groups);
  TESSERA_CHECK(h.offset >= 0, op, ": offset must be >= 0, got ", h.offset);
  TESSERA_CHECK(h.groups == 1 || h.group_stride >= h.heads * h.head_dim, op, ": group_stride (", h.group_stride,
                ") must be >= heads * head_dim (", h.heads * h.head_dim, ") so groups do not overlap");
  const int64_t end = h.offset + (h.groups - 1) * (h.groups > 1 ? h.group_stride : 0) + h.heads * h.head_dim;
  TESSERA_CHECK(end <= rows.dim(2), op, ": the rotated heads end at element ", end, " of a row but rows are ",
                rows.describe());
  if (positions.defined() && positions.data()) {
    require_dtype(op, positions, DType::i32, "positions");
    const int64_t s = rows.dim(0), b = rows.dim(1);
    if (positions.shape() != Shape{s} && positions.shape() != Shape{b, s} && positions.shape() != Shape{s * b})
      TESSERA_FAIL(op, ": positions must be [", s, "], [", b, ", ", s, "] or one per row [", s * b,
                   "] (i32) or undefined, got ", positions.describe());
  }
}
}  // namespace detail

namespace {
void run_rope(const char* op, const Tensor& rows, const RopeHeads& heads, const Tensor& positions, double theta,
              bool inverse) {
  if (detail::is_half(rows.dtype()) && rows.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({rows, positions}, {true, false}, [&](const std::vector<Tensor>& t) {
      run_rope(op, t[0], heads, t[1], theta, inverse);
    });
    return;
  }
  if (detail::runs_on_cuda(op, {&rows, &positions})) {
    if (inverse) return TESSERA_CUDA_OP(rope_backward_rows(rows, heads, positions, theta));
    return TESSERA_CUDA_OP(rope_forward_rows(rows, heads, positions, theta));
  }
  detail::check_rope_rows(op, rows, heads, positions, theta);
  const bool has_positions = positions.defined() && positions.data();
  cpu::RopeGeometry g;
  g.seq = rows.dim(0), g.batch = rows.dim(1), g.row_width = rows.dim(2);
  g.offset = heads.offset, g.heads = heads.heads, g.head_dim = heads.head_dim, g.groups = heads.groups;
  g.group_stride = heads.groups > 1 ? heads.group_stride : 0;
  g.rotary_dim = heads.rotary_dim > 0 ? heads.rotary_dim : heads.head_dim;
  g.interleaved = heads.interleaved;
  detail::visit_f32_or_f64(op, rows, "rows", [&](auto tag) {
    using T = decltype(tag);
    const bool per_row = has_positions && positions.ndim() == 1 && positions.dim(0) == g.seq * g.batch;
    cpu::rope_apply<T>(rows.data_as<T>(), g, theta, has_positions ? positions.data_as<int32_t>() : nullptr,
                       has_positions && positions.ndim() == 2, inverse, per_row);
  });
}

// x [s, b, heads, hn] as rows [s, b, heads * hn] with every head selected.
void run_rope_on_heads(const char* op, const Tensor& x, const char* name, const Tensor& positions, double theta,
                       bool inverse) {
  detail::require_defined(op, x, name);
  if (x.ndim() != 4) TESSERA_FAIL(op, ": ", name, " must be [s, b, heads, head_dim], got ", x.describe());
  RopeHeads heads;
  heads.heads = x.dim(2), heads.head_dim = x.dim(3);
  run_rope(op, x.view({x.dim(0), x.dim(1), x.dim(2) * x.dim(3)}), heads, positions, theta, inverse);
}
}  // namespace

void rope_forward(const Tensor& x, const Tensor& positions, double theta) {
  run_rope_on_heads("rope_forward", x, "x", positions, theta, false);
}

void rope_backward(const Tensor& grad, const Tensor& positions, double theta) {
  run_rope_on_heads("rope_backward", grad, "grad", positions, theta, true);
}

void rope_forward_rows(const Tensor& rows, const RopeHeads& heads, const Tensor& positions, double theta) {
  run_rope("rope_forward_rows", rows, heads, positions, theta, false);
}

void rope_backward_rows(const Tensor& grad_rows, const RopeHeads& heads, const Tensor& positions, double theta) {
  run_rope("rope_backward_rows", grad_rows, heads, positions, theta, true);
}

}  // namespace tessera::ops
