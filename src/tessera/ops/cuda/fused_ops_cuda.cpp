// CUDA host wrappers of the fused ops: RMSNorm, rotary position embedding and bias + dropout +
// residual add (see fused_ops_cuda.h); checks the arguments, then queues kernels/ launches.
#include "tessera/ops/cuda/fused_ops_cuda.h"

#include <algorithm>

#include "kernels/kernels.h"
#include "tessera/ops/bias_dropout_add.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/dropout_args.h"
#include "tessera/ops/cuda/cuda_op_checks.h"
#include "tessera/ops/op_checks.h"
#include "tessera/ops/rmsnorm.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda {

namespace {
cudaStream_t stream() { return CudaContext::get().stream(); }

bool present(const Tensor& t) { return t.defined() && t.data() != nullptr; }
}  // namespace

// ---- RMSNorm
void rmsnorm_forward(const Tensor& in, const Tensor& weight, double eps, const Tensor& out, const Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  TESSERA_CHECK(eps >= 0.0, op, ": eps must be >= 0, got ", eps);
  const int64_t rows = detail::check_rmsnorm_shapes(op, in, weight, rstd);
  require_storage_dtype(op, in, "in");
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_same_dtypes(op, in, "in", {{&weight, "weight"}, {&out, "out"}});
  require_like_or_f32(op, in, "in", rstd, "rstd");
  kernels::rmsnorm_forward(in.dtype(), in.data(), weight.data(), eps, rows, weight.dim(0), out.data(), rstd.dtype(),
                           rstd.data(), stream());
}

void rmsnorm_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& rstd,
                      const Tensor& din, const Tensor& dweight) {
  const char* op = "rmsnorm_backward";
  const int64_t rows = detail::check_rmsnorm_shapes(op, in, weight, rstd);
  require_storage_dtype(op, in, "in");
  detail::require_same_shape(op, in, "in", dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_shape(op, weight, "weight", dweight, "dweight");
  detail::require_same_dtypes(op, in, "in", {{&dout, "dout"}, {&weight, "weight"}, {&din, "din"}});
  require_like_or_f32(op, in, "in", rstd, "rstd");
  require_like_or_f32(op, in, "in", dweight, "dweight");
  const int64_t hidden = weight.dim(0);
  const bool deterministic = deterministic_mode();
  auto* scratch = static_cast<float*>(CudaContext::get().scratch(
      ScratchSlot::layernorm_sums,
      sizeof(float) * std::max<int64_t>(1, kernels::rmsnorm_backward_scratch_floats(rows, hidden, deterministic))));
  kernels::rmsnorm_backward(in.dtype(), dout.data(), in.data(), weight.data(), rstd.dtype(), rstd.data(), rows, hidden,
                            din.data(), dweight.dtype(), dweight.data(), scratch, stream(), deterministic);
}

// ---- rotary position embedding
namespace {
void run_rope(const char* op, const Tensor& rows, const RopeHeads& heads, const Tensor& positions, double theta,
              bool inverse) {
  detail::check_rope_rows(op, rows, heads, positions, theta);
  require_storage_dtype(op, rows, "rows");
  kernels::RopeArgs a;
  a.seq = rows.dim(0), a.batch = rows.dim(1), a.row_width = rows.dim(2);
  a.offset = heads.offset, a.heads = heads.heads, a.head_dim = heads.head_dim, a.groups = heads.groups;
  a.group_stride = heads.groups > 1 ? heads.group_stride : 0;
  a.rotary_dim = heads.rotary_dim > 0 ? heads.rotary_dim : heads.head_dim;
  a.interleaved = heads.interleaved;
  a.theta = theta;
  if (present(positions)) {
    a.positions = static_cast<const int32_t*>(positions.data());
    a.positions_per_batch = positions.ndim() == 2;
    a.positions_per_row = positions.ndim() == 1 && positions.dim(0) == a.seq * a.batch;
  }
  kernels::rope_apply(rows.dtype(), rows.data(), a, inverse, stream());
}
}  // namespace

void rope_forward_rows(const Tensor& rows, const RopeHeads& heads, const Tensor& positions, double theta) {
  run_rope("rope_forward_rows", rows, heads, positions, theta, false);
}

void rope_backward_rows(const Tensor& grad_rows, const RopeHeads& heads, const Tensor& positions, double theta) {
  run_rope("rope_backward_rows", grad_rows, heads, positions, theta, true);
}

// ---- bias + dropout + residual add
void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, double p,
                              const RandomStream& rng, uint64_t index_offset, const Tensor& out) {
  const char* op = "bias_dropout_add_forward";
  const int64_t cols = detail::check_bias_dropout_add_forward(op, x, bias, residual, p, out);
  require_storage_dtype(op, x, "x");
  detail::require_same_dtypes(op, x, "x", {{&residual, "residual"}, {&out, "out"}});
  if (present(bias)) detail::require_same_dtype(op, x, "x", bias, "bias");
  kernels::bias_dropout_add(x.dtype(), x.data(), present(bias) ? bias.data() : nullptr, residual.data(), x.numel(),
                            cols, dropout_args(rng, p, index_offset), out.data(), stream());
}

void bias_dropout_add_backward(const Tensor& dout, double p, const RandomStream& rng, uint64_t index_offset,
                               const Tensor& dx, const Tensor& dbias) {
  const char* op = "bias_dropout_add_backward";
  const int64_t cols = detail::check_bias_dropout_add_backward(op, dout, p, dx, dbias);
  require_storage_dtype(op, dout, "dout");
  detail::require_same_dtype(op, dout, "dout", dx, "dx");
  if (present(dbias)) require_like_or_f32(op, dout, "dout", dbias, "dbias");
  kernels::dropout_apply(dout.dtype(), dout.data(), dout.numel(), dropout_args(rng, p, index_offset), dx.data(),
                         stream());
  if (present(dbias))
    kernels::column_sum_accumulate(dout.dtype(), dx.data(), cols ? dx.numel() / cols : 0, cols, dbias.dtype(),
                                   dbias.data(), stream(), column_sum_scratch(cols ? dx.numel() / cols : 0, cols));
}

}  // namespace tessera::ops::cuda
