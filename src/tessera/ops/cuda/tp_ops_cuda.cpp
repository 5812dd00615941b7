#include "tessera/ops/cuda/tp_ops_cuda.h"

#include "kernels/kernels.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda {

namespace {
cudaStream_t stream() { return CudaContext::get().stream(); }

void require_2d_cuda(const char* op, const Tensor& t, const char* name) {
  TESSERA_CHECK(t.ndim() == 2 && t.device().is_cuda(), op, ": ", name, " must be a 2-D CUDA tensor, got ",
                t.describe());
}
}  // namespace

void vocab_parallel_embedding_forward(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out) {
  const char* op = "vocab_parallel_embedding_forward";
  require_2d_cuda(op, table, "table");
  TESSERA_CHECK(ids.dtype() == DType::i32 && ids.device().is_cuda(), op, ": ids must be CUDA i32, got ",
                ids.describe());
  TESSERA_CHECK(out.dtype() == table.dtype() && out.numel() == ids.numel() * table.dim(1), op, ": out ",
                out.describe(), " must hold ", ids.numel(), " rows of ", table.describe());
  kernels::vocab_parallel_embedding_forward(table.dtype(), ids.data_as<int32_t>(), ids.numel(), table.data(), first_id,
                                            table.dim(0), table.dim(1), out.data(), stream());
}

void vocab_parallel_embedding_backward(const Tensor& ids, const Tensor& dout, int64_t first_id, const Tensor& dtable) {
  const char* op = "vocab_parallel_embedding_backward";
  require_2d_cuda(op, dtable, "dtable");
  TESSERA_CHECK(ids.dtype() == DType::i32 && ids.device().is_cuda(), op, ": ids must be CUDA i32, got ",
                ids.describe());
  TESSERA_CHECK(dout.numel() == ids.numel() * dtable.dim(1), op, ": dout ", dout.describe(), " must hold ", ids.numel(),
                " rows of ", dtable.describe());
  void* det_scratch = deterministic_mode() ? CudaContext::get().scratch(
                                                 ScratchSlot::embedding_sort,
                                                 kernels::embedding_backward_scratch_bytes(ids.numel()))
                                           : nullptr;
  kernels::vocab_parallel_embedding_backward(dout.dtype(), ids.data_as<int32_t>(), ids.numel(), dout.data(), first_id,
                                             dtable.dim(0), dtable.dim(1), dtable.dtype(), dtable.data(), stream(),
                                             det_scratch);
}

void add_bias_rows(const Tensor& out, const Tensor& bias) {
  const char* op = "add_bias_rows";
  require_2d_cuda(op, out, "out");
  TESSERA_CHECK(bias.dtype() == out.dtype() && bias.numel() == out.dim(1) && bias.device().is_cuda(), op, ": bias ",
                bias.describe(), " must be [", out.dim(1), "] of ", dtype_name(out.dtype()), " on the GPU");
  kernels::add_bias_rows(out.dtype(), out.data(), bias.data(), out.dim(0), out.dim(1), stream());
}

void accumulate_bias_grad(const Tensor& dout, const Tensor& dbias) {
  const char* op = "accumulate_bias_grad";
  require_2d_cuda(op, dout, "dout");
  TESSERA_CHECK(dbias.numel() == dout.dim(1) && dbias.device().is_cuda() &&
                    (dbias.dtype() == dout.dtype() || dbias.dtype() == DType::f32),
                op, ": dbias ", dbias.describe(), " must be [", dout.dim(1), "] of ", dtype_name(dout.dtype()),
                " or f32 on the GPU");
  kernels::column_sum_accumulate(dout.dtype(), dout.data(), dout.dim(0), dout.dim(1), dbias.dtype(), dbias.data(),
                                 stream(), column_sum_scratch(dout.dim(0), dout.dim(1)));
}

void copy_columns(const Tensor& src, int64_t first_column, const Tensor& dst) {
  const char* op = "copy_columns";
  require_2d_cuda(op, src, "src");
  require_2d_cuda(op, dst, "dst");
  TESSERA_CHECK(src.dtype() == dst.dtype() && src.dim(0) == dst.dim(0) && first_column >= 0 &&
                    first_column + dst.dim(1) <= src.dim(1),
                op, ": columns [", first_column, ", ", first_column + dst.dim(1), ") of ", src.describe(), " into ",
                dst.describe());
  const size_t elem = dtype_size(src.dtype());
  TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(dst.data(), dst.dim(1) * elem,
                                       static_cast<const char*>(src.data()) + first_column * elem, src.dim(1) * elem,
                                       dst.dim(1) * elem, dst.dim(0), cudaMemcpyDeviceToDevice, stream()));
}

void place_columns(const Tensor& src, const Tensor& dst, int64_t first_column) {
  const char* op = "place_columns";
  require_2d_cuda(op, src, "src");
  require_2d_cuda(op, dst, "dst");
  TESSERA_CHECK(src.dtype() == dst.dtype() && src.dim(0) == dst.dim(0) && first_column >= 0 &&
                    first_column + src.dim(1) <= dst.dim(1),
                op, ": ", src.describe(), " into columns [", first_column, ", ", first_column + src.dim(1), ") of ",
                dst.describe());
  const size_t elem = dtype_size(src.dtype());
  TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst.data()) + first_column * elem, dst.dim(1) * elem,
                                       src.data(), src.dim(1) * elem, src.dim(1) * elem, src.dim(0),
                                       cudaMemcpyDeviceToDevice, stream()));
}

}  // namespace tessera::ops::cuda
