#include "tessera/nn/parallel_linear.h"

#include "tessera/ops/elementwise.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/linear.h"
#include "tessera/tensor_parallel/tp_mappings.h"

#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/tp_ops_cuda.h"
#endif

namespace tessera::nn {

namespace {

template <typename T>
void add_bias_rows_t(const Tensor& out, const Tensor& bias) {
  T* y = out.data_as<T>();
  const T* b = bias.data_as<T>();
  int64_t n = out.dim(0), k = out.dim(1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) y[i * k + j] += b[j];
}

template <typename T>
void accumulate_bias_grad_t(const Tensor& dout, const Tensor& dbias) {
  const T* d = dout.data_as<T>();
  T* db = dbias.data_as<T>();
  int64_t n = dout.dim(0), k = dout.dim(1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) db[j] += d[i * k + j];
}

void require_same_dtype(const Tensor& rows, const Tensor& bias, const char* what) {
  TESSERA_CHECK(rows.dtype() == bias.dtype(), "RowParallelLinear ", what, ": ", rows.describe(), " and bias ",
                bias.describe(), " differ in dtype");
}

// bf16 / f16 go through f32 copies (f32 compute, one rounding of the result), as the ops do.
void add_bias_rows(const Tensor& out, const Tensor& bias) {
  require_same_dtype(out, bias, "bias add");
#ifdef TESSERA_HAVE_CUDA
  if (out.device().is_cuda()) return ops::cuda::add_bias_rows(out, bias);
#endif
  if (out.dtype() == DType::f32) add_bias_rows_t<float>(out, bias);
  else if (out.dtype() == DType::f64) add_bias_rows_t<double>(out, bias);
  else if (ops::detail::is_half(out.dtype()))
    ops::detail::compute_in_f32({out, bias}, {true, false},
                                [](const std::vector<Tensor>& t) { add_bias_rows_t<float>(t[0], t[1]); });
  else TESSERA_FAIL("RowParallelLinear: no bias add for ", dtype_name(out.dtype()), " (allowed: f32, f64, bf16, f16)");
}

void accumulate_bias_grad(const Tensor& dout, const Tensor& dbias) {
#ifdef TESSERA_HAVE_CUDA
  if (dout.device().is_cuda()) return ops::cuda::accumulate_bias_grad(dout, dbias);
#endif
  require_same_dtype(dout, dbias, "bias gradient");
  if (dout.dtype() == DType::f32) accumulate_bias_grad_t<float>(dout, dbias);
  else if (dout.dtype() == DType::f64) accumulate_bias_grad_t<double>(dout, dbias);
  else if (ops::detail::is_half(dout.dtype()))
    ops::detail::compute_in_f32({dout, dbias}, {false, true},
                                [](const std::vector<Tensor>& t) { accumulate_bias_grad_t<float>(t[0], t[1]); });
  else TESSERA_FAIL("RowParallelLinear: no bias gradient for ", dtype_name(dout.dtype()),
                    " (allowed: f32, f64, bf16, f16)");
}

void check_divisible(const std::string& name, const char* what, int64_t features, int tp) {
  TESSERA_CHECK(features % tp == 0, name, ": ", what, " features ", features,
                " not divisible by the tensor-parallel size ", tp);
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(ParameterStore& store, const std::string& name, int64_t in_features,
                                           int64_t out_features, bool bias, double init_std,
                                           const parallel::TensorParallel& tp)
    : store_(&store), tp_(tp), in_features_(in_features) {
  check_divisible(name, "output", out_features, tp.size);
  local_out_ = out_features / tp.size;
  Sharding split = Sharding::split(0, out_features, tp.size, tp.rank);
  weight_ = store.add(name + ".weight", {local_out_, in_features}, Init::normal, init_std, true, split);
  if (bias) bias_ = store.add(name + ".bias", {local_out_}, Init::zeros, 0.0, false, split);
}

Tensor ColumnParallelLinear::weight() const { return store_->value(weight_); }
Tensor ColumnParallelLinear::bias() const { return bias_ >= 0 ? store_->value(bias_) : Tensor(); }
Tensor RowParallelLinear::weight() const { return store_->value(weight_); }
Tensor RowParallelLinear::bias() const { return bias_ >= 0 ? store_->value(bias_) : Tensor(); }

Tensor ColumnParallelLinear::forward(Arena& arena, const Tensor& in, Tensor& total_input) const {
  total_input = tp_.sequence_parallel ? parallel::gather_from_sp_forward(arena, in, tp_)
                                      : parallel::copy_to_tp_forward(in, tp_);
  Tensor out = arena.allocate(in.dtype(), {total_input.dim(0), local_out_});
  ops::linear_forward(total_input, store_->value(weight_), bias_ >= 0 ? store_->value(bias_) : Tensor(), out);
  return out;
}

Tensor ColumnParallelLinear::forward_gelu(Arena& arena, Arena& activation_arena, const Tensor& in,
                                          Tensor& total_input, Tensor& activation) const {
  total_input = tp_.sequence_parallel ? parallel::gather_from_sp_forward(arena, in, tp_)
                                      : parallel::copy_to_tp_forward(in, tp_);
  Tensor pre_activation = arena.allocate(in.dtype(), {total_input.dim(0), local_out_});
  activation = activation_arena.allocate(in.dtype(), {total_input.dim(0), local_out_});
  ops::linear_gelu_forward(total_input, store_->value(weight_), bias_ >= 0 ? store_->value(bias_) : Tensor(),
                           pre_activation, activation);
  return pre_activation;
}

Tensor ColumnParallelLinear::backward(Arena& arena, const Tensor& dout, const Tensor& total_input) const {
  Tensor dtotal = arena.allocate(total_input.dtype(), {total_input.dim(0), in_features_});
  ops::linear_backward(dout, total_input, store_->value(weight_), dtotal, store_->grad(weight_),
                       bias_ >= 0 ? store_->grad(bias_) : Tensor());
  return tp_.sequence_parallel ? parallel::gather_from_sp_backward(arena, dtotal, tp_)
                               : parallel::copy_to_tp_backward(arena, dtotal, tp_);
}

RowParallelLinear::RowParallelLinear(ParameterStore& store, const std::string& name, int64_t in_features,
                                     int64_t out_features, bool bias, double init_std,
                                     const parallel::TensorParallel& tp)
    : store_(&store), tp_(tp), out_features_(out_features) {
  check_divisible(name, "input", in_features, tp.size);
  local_in_ = in_features / tp.size;
  weight_ = store.add(name + ".weight", {out_features, local_in_}, Init::normal, init_std, true,
                      Sharding::split(1, in_features, tp.size, tp.rank));
  Sharding replicated;
  replicated.sequence_parallel = tp.sequence_parallel;
  if (bias) bias_ = store.add(name + ".bias", {out_features}, Init::zeros, 0.0, false, replicated);
}

Tensor RowParallelLinear::forward(Arena& arena, const Tensor& in, const Tensor& residual) const {
  Tensor partial = arena.allocate(in.dtype(), {in.dim(0), out_features_});
  if (!tp_.enabled()) {  // exactly nn::Linear
    const Tensor bias = bias_ >= 0 ? store_->value(bias_) : Tensor();
    if (residual.defined()) ops::linear_residual_forward(in, store_->value(weight_), bias, residual, partial);
    else ops::linear_forward(in, store_->value(weight_), bias, partial);
    return partial;
  }
  ops::linear_forward(in, store_->value(weight_), Tensor(), partial);
  Tensor out = tp_.sequence_parallel ? parallel::reduce_scatter_to_sp_forward(arena, partial, tp_)
                                     : parallel::reduce_from_tp_forward(arena, partial, tp_);
  if (bias_ >= 0) add_bias_rows(out, store_->value(bias_));  // after the reduction: added once
  if (residual.defined()) ops::add(out, residual, out);
  return out;
}

Tensor RowParallelLinear::backward(Arena& arena, const Tensor& dout, const Tensor& in) const {
  return backward_impl(arena, dout, in, nullptr);
}

Tensor RowParallelLinear::backward_dgelu(Arena& arena, const Tensor& dout, const Tensor& in,
                                         const Tensor& pre_activation) const {
  return backward_impl(arena, dout, in, &pre_activation);
}

// pre_activation null: din = d(in); else in = gelu(*pre_activation) and din = d(*pre_activation).
Tensor RowParallelLinear::backward_impl(Arena& arena, const Tensor& dout, const Tensor& in,
                                        const Tensor* pre_activation) const {
  Tensor din = arena.allocate(in.dtype(), {in.dim(0), local_in_});
  auto linear_backward = [&](const Tensor& d, const Tensor& dbias) {
    if (pre_activation)
      ops::linear_backward_dgelu(d, in, store_->value(weight_), *pre_activation, din, store_->grad(weight_), dbias);
    else ops::linear_backward(d, in, store_->value(weight_), din, store_->grad(weight_), dbias);
  };
  if (!tp_.enabled()) {
    linear_backward(dout, bias_ >= 0 ? store_->grad(bias_) : Tensor());
    return din;
  }
  // Under SP dout holds this rank's tokens only: the bias grad is partial (all-reduced over TP later).
  if (bias_ >= 0) accumulate_bias_grad(dout, store_->grad(bias_));
  Tensor dtotal = tp_.sequence_parallel ? parallel::reduce_scatter_to_sp_backward(arena, dout, tp_)
                                        : parallel::reduce_from_tp_backward(dout, tp_);
  linear_backward(dtotal, Tensor());
  return din;
}

}  // namespace tessera::nn
