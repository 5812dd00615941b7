#include "tessera/tensor_parallel/tp_mappings.h"

#include "tessera/ops/elementwise.h"

#include <cstring>

#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/tp_ops_cuda.h"
#endif

namespace tessera::parallel {

namespace {

void check_2d(const Tensor& t, const char* what) {
  TESSERA_CHECK(t.ndim() == 2, what, ": expected a 2-D tensor [n, k], got ", t.describe());
}

// dst [n, k] = src [n, K] columns [first, first + k), or (place) the reverse, on the tensors' device.
void copy_column_block(const Tensor& src, int64_t first, const Tensor& dst, bool place) {
#ifdef TESSERA_HAVE_CUDA
  if (src.device().is_cuda()) {
    if (place) ops::cuda::place_columns(src, dst, first);
    else ops::cuda::copy_columns(src, first, dst);
    return;
  }
#endif
  const Tensor& wide = place ? dst : src;
  const Tensor& narrow = place ? src : dst;
  const size_t elem = dtype_size(src.dtype());
  const auto row_bytes = static_cast<size_t>(narrow.dim(1)) * elem;
  for (int64_t i = 0; i < narrow.dim(0); ++i) {
    char* w = static_cast<char*>(wide.data()) + static_cast<size_t>(i * wide.dim(1) + first) * elem;
    char* n = static_cast<char*>(narrow.data()) + static_cast<size_t>(i) * row_bytes;
    if (place) std::memcpy(w, n, row_bytes);
    else std::memcpy(n, w, row_bytes);
  }
}

Tensor all_reduce_copy(Arena& arena, const Tensor& x, const TensorParallel& tp) {
  Tensor out = arena.allocate(x.dtype(), x.shape());
  tp.comm->all_reduce(x, out, ReduceOp::sum);
  return out;
}

// Rows: x [n/tp, k] -> [n, k], rank r's rows at block r.
Tensor all_gather_rows(Arena& arena, const Tensor& x, const TensorParallel& tp) {
  Tensor out = arena.allocate(x.dtype(), {x.dim(0) * tp.size, x.dim(1)});
  tp.comm->all_gather(x, out);
  return out;
}

Tensor reduce_scatter_rows(Arena& arena, const Tensor& x, const TensorParallel& tp, const char* what) {
  TESSERA_CHECK(x.dim(0) % tp.size == 0, what, ": ", x.dim(0), " rows (sequence x batch tokens) not divisible by ",
                "the tensor-parallel size ", tp.size);
  Tensor out = arena.allocate(x.dtype(), {x.dim(0) / tp.size, x.dim(1)});
  tp.comm->reduce_scatter(x, out, ReduceOp::sum);
  return out;
}

Tensor split_rows(Arena& arena, const Tensor& x, const TensorParallel& tp, const char* what) {
  TESSERA_CHECK(x.dim(0) % tp.size == 0, what, ": ", x.dim(0), " rows (sequence x batch tokens) not divisible by ",
                "the tensor-parallel size ", tp.size);
  int64_t n = x.dim(0) / tp.size;
  Tensor out = arena.allocate(x.dtype(), {n, x.dim(1)});
  ops::copy(x.rows(tp.rank * n, (tp.rank + 1) * n), out);
  return out;
}

Tensor split_columns(Arena& arena, const Tensor& x, const TensorParallel& tp, const char* what) {
  TESSERA_CHECK(x.dim(1) % tp.size == 0, what, ": last dimension ", x.dim(1),
                " not divisible by the tensor-parallel size ", tp.size);
  int64_t n = x.dim(0), k = x.dim(1) / tp.size;
  Tensor out = arena.allocate(x.dtype(), {n, k});
  copy_column_block(x, tp.rank * k, out, false);
  return out;
}

Tensor gather_columns(Arena& arena, const Tensor& x, const TensorParallel& tp) {
  int64_t n = x.dim(0), k = x.dim(1);
  Tensor blocks = arena.allocate(x.dtype(), {tp.size * n, k});  // block r = rank r's [n, k]
  tp.comm->all_gather(x, blocks);
  Tensor out = arena.allocate(x.dtype(), {n, k * tp.size});
  for (int r = 0; r < tp.size; ++r) copy_column_block(blocks.rows(r * n, (r + 1) * n), r * k, out, true);
  return out;
}

}  // namespace

Tensor copy_to_tp_forward(const Tensor& x, const TensorParallel&) { return x; }
Tensor copy_to_tp_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp) {
  return tp.enabled() ? all_reduce_copy(arena, dy, tp) : dy;
}

Tensor reduce_from_tp_forward(Arena& arena, const Tensor& x, const TensorParallel& tp) {
  return tp.enabled() ? all_reduce_copy(arena, x, tp) : x;
}
Tensor reduce_from_tp_backward(const Tensor& dy, const TensorParallel&) { return dy; }

Tensor scatter_to_tp_last_dim_forward(Arena& arena, const Tensor& x, const TensorParallel& tp) {
  if (!tp.enabled()) return x;
  check_2d(x, "scatter_to_tp_last_dim");
  return split_columns(arena, x, tp, "scatter_to_tp_last_dim");
}
Tensor scatter_to_tp_last_dim_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp) {
  if (!tp.enabled()) return dy;
  check_2d(dy, "scatter_to_tp_last_dim backward");
  return gather_columns(arena, dy, tp);
}
Tensor gather_from_tp_last_dim_forward(Arena& arena, const Tensor& x, const TensorParallel& tp) {
  if (!tp.enabled()) return x;
  check_2d(x, "gather_from_tp_last_dim");
  return gather_columns(arena, x, tp);
}
Tensor gather_from_tp_last_dim_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp) {
  if (!tp.enabled()) return dy;
  check_2d(dy, "gather_from_tp_last_dim backward");
  return split_columns(arena, dy, tp, "gather_from_tp_last_dim backward");
}

Tensor scatter_to_sp_forward(Arena& arena, const Tensor& x, const TensorParallel& tp) {
  if (!tp.enabled()) return x;
  check_2d(x, "scatter_to_sp");
  return split_rows(arena, x, tp, "scatter_to_sp");
}
Tensor scatter_to_sp_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp) {
  if (!tp.enabled()) return dy;
  check_2d(dy, "scatter_to_sp backward");
  return all_gather_rows(arena, dy, tp);
}
Tensor gather_from_sp_forward(Arena& arena, const Tensor& x, const TensorParallel& tp) {
  if (!tp.enabled()) return x;
  check_2d(x, "gather_from_sp");
  return all_gather_rows(arena, x, tp);
}
Tensor gather_from_sp_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp) {
  if (!tp.enabled()) return dy;
  check_2d(dy, "gather_from_sp backward");
  return reduce_scatter_rows(arena, dy, tp, "gather_from_sp backward");
}
Tensor reduce_scatter_to_sp_forward(Arena& arena, const Tensor& x, const TensorParallel& tp) {
  if (!tp.enabled()) return x;
  check_2d(x, "reduce_scatter_to_sp");
  return reduce_scatter_rows(arena, x, tp, "reduce_scatter_to_sp");
}
Tensor reduce_scatter_to_sp_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp) {
  if (!tp.enabled()) return dy;
  check_2d(dy, "reduce_scatter_to_sp backward");
  return all_gather_rows(arena, dy, tp);
}

}  // namespace tessera::parallel
