// Embedding dispatch: checks devices, dtypes and shapes, then runs the CPU reference (cpu/embedding.h).
#include "tessera/ops/embedding.h"

#include "tessera/ops/cpu/embedding.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {
// out may be [n, h] or ids.shape + [h].
void check_rows_tensor(const char* op, const Tensor& ids, const Tensor& rows, int64_t hidden, const char* name) {
  Shape nested = ids.shape();
  nested.push_back(hidden);
  const Shape flat{ids.numel(), hidden};
  if (rows.shape() != nested && rows.shape() != flat)
    TESSERA_FAIL(op, ": ", name, " must be ", shape_string(flat), " or ", shape_string(nested), " for ids ",
                 ids.describe(), ", got ", rows.describe());
}
}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const char* op = "embedding_forward";
  if (detail::is_half(table.dtype()) && table.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({ids, table, out}, {false, false, true}, [&](const std::vector<Tensor>& t) { embedding_forward(t[0], t[1], t[2]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&ids, &table, &out})) return TESSERA_CUDA_OP(embedding_forward(ids, table, out));
  detail::require_dtype(op, ids, DType::i32, "ids");
  TESSERA_CHECK(table.ndim() == 2, op, ": table must be [vocab, hidden], got ", table.describe());
  detail::require_same_dtype(op, table, "table", out, "out");
  check_rows_tensor(op, ids, out, table.dim(1), "out");
  detail::visit_f32_or_f64(op, table, "table", [&](auto tag) {
    using T = decltype(tag);
    cpu::embedding_forward<T>(ids.data_as<int32_t>(), ids.numel(), table.data_as<T>(), table.dim(0), table.dim(1),
                              out.data_as<T>());
  });
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  const char* op = "embedding_backward";
  if (detail::is_half(dout.dtype()) && dout.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({ids, dout, dtable}, {false, false, true}, [&](const std::vector<Tensor>& t) { embedding_backward(t[0], t[1], t[2]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&ids, &dout, &dtable})) return TESSERA_CUDA_OP(embedding_backward(ids, dout, dtable));
  detail::require_dtype(op, ids, DType::i32, "ids");
  TESSERA_CHECK(dtable.ndim() == 2, op, ": dtable must be [vocab, hidden], got ", dtable.describe());
  detail::require_same_dtype(op, dtable, "dtable", dout, "dout");
  check_rows_tensor(op, ids, dout, dtable.dim(1), "dout");
  detail::visit_f32_or_f64(op, dtable, "dtable", [&](auto tag) {
    using T = decltype(tag);
    cpu::embedding_backward<T>(ids.data_as<int32_t>(), ids.numel(), dout.data_as<T>(), dtable.dim(0), dtable.dim(1),
                               dtable.data_as<T>());
  });
}

}  // namespace tessera::ops
