#include "tessera/ops/column_sums.h"

#include "tessera/ops/cpu/bias_dropout_add.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/half_compute.h"

#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/tp_ops_cuda.h"
#endif

namespace tessera::ops {

void column_sum_accumulate(const Tensor& x, const Tensor& sums) {
  const char* op = "column_sum_accumulate";
  TESSERA_CHECK(x.ndim() >= 1 && sums.ndim() == 1 && sums.dim(0) == x.dim(x.ndim() - 1), op, ": sums ",
                sums.describe(), " must be [", x.ndim() >= 1 ? x.dim(x.ndim() - 1) : 0, "] (the last dim of x ",
                x.describe(), ")");
  const int64_t cols = sums.dim(0), rows = cols ? x.numel() / cols : 0;
  if (detail::runs_on_cuda(op, {&x, &sums})) return TESSERA_CUDA_OP(accumulate_bias_grad(x.view({rows, cols}), sums));
  if (detail::is_half(x.dtype()) || detail::is_half(sums.dtype())) {  // f32 compute, as the linears
    detail::compute_in_f32({x, sums}, {false, true},
                           [](const std::vector<Tensor>& t) { column_sum_accumulate(t[0], t[1]); });
    return;
  }
  detail::require_same_dtype(op, x, "x", sums, "sums");
  detail::visit_f32_or_f64(op, x, "x", [&](auto tag) {
    using T = decltype(tag);
    cpu::column_sum_accumulate<T>(x.data_as<T>(), rows, cols, sums.data_as<T>());
  });
}

}  // namespace tessera::ops
