#include "tessera/ops/cuda/moe_ops_cuda.h"

#include "kernels/moe_kernels.h"
#include "tessera/core/error.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/cuda_op_checks.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops::cuda {

namespace {
cudaStream_t stream() { return CudaContext::get().stream(); }

void require_cuda(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors) {
  for (const auto& [t, name] : tensors) {
    detail::require_defined(op, *t, name);
    if (!t->device().is_cuda()) TESSERA_FAIL(op, ": ", name, " must be a CUDA tensor, got ", t->describe());
  }
}
void require_numel(const char* op, const Tensor& t, const char* name, DType dtype, int64_t numel) {
  detail::require_dtype(op, t, dtype, name);
  if (t.numel() != numel) TESSERA_FAIL(op, ": ", name, " must have ", numel, " elements, got ", t.describe());
}
int score_code(const RouterOptions& o) { return o.score == RouterScore::sigmoid ? 1 : 0; }
// [T, E] f32 logits; {T, E}.
std::pair<int64_t, int64_t> logits_shape(const char* op, const Tensor& logits, const RouterOptions& o) {
  detail::require_dtype(op, logits, DType::f32, "logits");
  if (logits.ndim() != 2) TESSERA_FAIL(op, ": logits must be [tokens, experts], got ", logits.describe());
  if (o.topk < 1 || o.topk > logits.dim(1))
    TESSERA_FAIL(op, ": topk = ", o.topk, " outside [1, experts = ", logits.dim(1), "]");
  return {logits.dim(0), logits.dim(1)};
}
// rows [R, h] and tokens [T, h] of one storage dtype; returns h.
int64_t rows_and_tokens(const char* op, const Tensor& rows, const char* rows_name, const Tensor& tokens,
                        const char* tokens_name) {
  require_storage_dtype(op, rows, rows_name);
  detail::require_same_dtype(op, rows, rows_name, tokens, tokens_name);
  if (rows.ndim() != 2 || tokens.ndim() != 2 || rows.dim(1) != tokens.dim(1))
    TESSERA_FAIL(op, ": ", rows_name, " ", rows.describe(), " and ", tokens_name, " ", tokens.describe(),
                 " must be [rows, h] and [tokens, h]");
  return rows.dim(1);
}
}  // namespace

void moe_router_forward(const Tensor& logits, const RouterOptions& o, const Tensor& experts, const Tensor& probs) {
  const char* op = "moe_router_forward_device";
  require_cuda(op, {{&logits, "logits"}, {&experts, "experts"}, {&probs, "probs"}});
  const auto [t, e] = logits_shape(op, logits, o);
  require_numel(op, experts, "experts", DType::i32, t * o.topk);
  require_numel(op, probs, "probs", DType::f32, t * o.topk);
  kernels::moe_router_forward(static_cast<const float*>(logits.data()), t, e, o.topk, score_code(o), o.pre_softmax,
                              static_cast<int32_t*>(experts.data()), static_cast<float*>(probs.data()), stream());
}

void moe_router_backward(const Tensor& logits, const Tensor& experts, const RouterOptions& o, const Tensor& dprobs,
                         const Tensor& dlogits) {
  const char* op = "moe_router_backward_device";
  require_cuda(op, {{&logits, "logits"}, {&experts, "experts"}, {&dprobs, "dprobs"}, {&dlogits, "dlogits"}});
  const auto [t, e] = logits_shape(op, logits, o);
  require_numel(op, experts, "experts", DType::i32, t * o.topk);
  require_numel(op, dprobs, "dprobs", DType::f32, t * o.topk);
  detail::require_same_shape(op, logits, "logits", dlogits, "dlogits");
  detail::require_dtype(op, dlogits, DType::f32, "dlogits");
  kernels::moe_router_backward(static_cast<const float*>(logits.data()), static_cast<const int32_t*>(experts.data()),
                               static_cast<const float*>(dprobs.data()), t, e, o.topk, score_code(o), o.pre_softmax,
                               static_cast<float*>(dlogits.data()), stream());
}

void moe_expert_counts(const Tensor& experts, const Tensor& counts) {
  const char* op = "moe_expert_counts_device";
  require_cuda(op, {{&experts, "experts"}, {&counts, "counts"}});
  detail::require_dtype(op, experts, DType::i32, "experts");
  detail::require_dtype(op, counts, DType::i64, "counts");
  kernels::moe_expert_counts(static_cast<const int32_t*>(experts.data()), experts.numel(), counts.numel(),
                             static_cast<int64_t*>(counts.data()), stream());
}

void moe_permute_forward(const Tensor& x, const Tensor& row_slot, int64_t topk, const Tensor& out) {
  const char* op = "moe_permute_forward_device";
  require_cuda(op, {{&x, "x"}, {&row_slot, "row_slot"}, {&out, "out"}});
  const int64_t h = rows_and_tokens(op, out, "out", x, "x");
  require_numel(op, row_slot, "row_slot", DType::i64, out.dim(0));
  TESSERA_CHECK(topk >= 1, op, ": topk = ", topk);
  kernels::moe_permute_forward(x.dtype(), x.data(), static_cast<const int64_t*>(row_slot.data()), out.dim(0), h, topk,
                               out.data(), stream());
}

void moe_permute_backward(const Tensor& dout, const Tensor& slot_row, const Tensor& dx) {
  const char* op = "moe_permute_backward_device";
  require_cuda(op, {{&dout, "dout"}, {&slot_row, "slot_row"}, {&dx, "dx"}});
  const int64_t h = rows_and_tokens(op, dout, "dout", dx, "dx");
  detail::require_dtype(op, slot_row, DType::i64, "slot_row");
  const int64_t t = dx.dim(0);
  TESSERA_CHECK(t > 0 ? slot_row.numel() % t == 0 : slot_row.numel() == 0, op, ": slot_row ", slot_row.describe(),
                " is not [tokens x topk] for ", t, " tokens");
  kernels::moe_permute_backward(dout.dtype(), dout.data(), static_cast<const int64_t*>(slot_row.data()), t, h,
                                t > 0 ? slot_row.numel() / t : 1, dx.data(), stream());
}

void moe_unpermute_forward(const Tensor& expert_out, const Tensor& slot_row, const Tensor& probs, const Tensor& y) {
  const char* op = "moe_unpermute_forward_device";
  require_cuda(op, {{&expert_out, "expert_out"}, {&slot_row, "slot_row"}, {&probs, "probs"}, {&y, "y"}});
  const int64_t h = rows_and_tokens(op, expert_out, "expert_out", y, "y");
  detail::require_dtype(op, slot_row, DType::i64, "slot_row");
  const int64_t t = y.dim(0);
  TESSERA_CHECK(t > 0 ? slot_row.numel() % t == 0 : slot_row.numel() == 0, op, ": slot_row ", slot_row.describe(),
                " is not [tokens x topk] for ", t, " tokens");
  require_numel(op, probs, "probs", DType::f32, slot_row.numel());
  kernels::moe_unpermute_forward(y.dtype(), expert_out.data(), static_cast<const int64_t*>(slot_row.data()),
                                 static_cast<const float*>(probs.data()), t, h, t > 0 ? slot_row.numel() / t : 1,
                                 y.data(), stream());
}

void moe_unpermute_backward(const Tensor& dy, const Tensor& expert_out, const Tensor& row_slot, const Tensor& probs,
                            const Tensor& dexpert_out, const Tensor& dprobs) {
  const char* op = "moe_unpermute_backward_device";
  require_cuda(op, {{&dy, "dy"}, {&expert_out, "expert_out"}, {&row_slot, "row_slot"}, {&probs, "probs"},
                    {&dexpert_out, "dexpert_out"}, {&dprobs, "dprobs"}});
  const int64_t h = rows_and_tokens(op, expert_out, "expert_out", dy, "dy");
  detail::require_same_shape(op, expert_out, "expert_out", dexpert_out, "dexpert_out");
  detail::require_same_dtype(op, expert_out, "expert_out", dexpert_out, "dexpert_out");
  require_numel(op, row_slot, "row_slot", DType::i64, expert_out.dim(0));
  detail::require_dtype(op, probs, DType::f32, "probs");
  require_numel(op, dprobs, "dprobs", DType::f32, probs.numel());
  const int64_t t = dy.dim(0);
  TESSERA_CHECK(t > 0 ? probs.numel() % t == 0 : probs.numel() == 0, op, ": probs ", probs.describe(),
                " is not [tokens x topk] for ", t, " tokens");
  kernels::moe_unpermute_backward(dy.dtype(), dy.data(), expert_out.data(),
                                  static_cast<const int64_t*>(row_slot.data()), static_cast<const float*>(probs.data()),
                                  expert_out.dim(0), t, h, t > 0 ? probs.numel() / t : 1, dexpert_out.data(),
                                  static_cast<float*>(dprobs.data()), stream());
}

}  // namespace tessera::ops::cuda
