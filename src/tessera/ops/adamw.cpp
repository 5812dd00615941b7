// AdamW dispatch: checks devices, dtypes, shapes and hyperparameters, then runs the CPU reference
// (cpu/adamw.h).
#include "tessera/ops/adamw.h"

#include "tessera/ops/cpu/adamw.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWParams& params) {
  const char* op = "adamw_update";
  if (detail::runs_on_cuda(op, {&param, &grad, &exp_avg, &exp_avg_sq})) return TESSERA_CUDA_OP(adamw_update(param, grad, exp_avg, exp_avg_sq, params));
  TESSERA_CHECK(params.step >= 1, op, ": step counts from 1, got ", params.step);
  TESSERA_CHECK(params.beta1 >= 0.0 && params.beta1 < 1.0 && params.beta2 >= 0.0 && params.beta2 < 1.0, op,
                ": beta1 and beta2 must be in [0, 1), got ", params.beta1, " and ", params.beta2);
  TESSERA_CHECK(params.eps > 0.0, op, ": eps must be positive, got ", params.eps);
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&grad, "grad"}, {&exp_avg, "exp_avg"},
                                {&exp_avg_sq, "exp_avg_sq"}})
    detail::require_same_shape(op, param, "param", *t, name);
  detail::require_same_dtypes(op, param, "param", {{&grad, "grad"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}});
  detail::visit_f32_or_f64(op, param, "param", [&](auto tag) {
    using T = decltype(tag);
    cpu::adamw_update<T>(param.data_as<T>(), grad.data_as<T>(), exp_avg.data_as<T>(), exp_avg_sq.data_as<T>(),
                         param.numel(), params);
  });
}

}  // namespace tessera::ops
