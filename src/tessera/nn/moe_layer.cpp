#include "tessera/nn/moe_layer.h"

#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linear.h"
#include "tessera/ops/moe_aux_loss.h"
#include "tessera/ops/moe_capacity.h"

namespace tessera::nn {

MoeLayer::MoeLayer(ParameterStore& store, const std::string& name, int64_t hidden, const MoeShape& shape,
                   double init_std, double output_init_std, const parallel::TensorParallel& tp, const MlpOptions& mlp)
    : name_(name), shape_(shape), store_(&store) {
  TESSERA_CHECK(shape.num_experts > 0 && shape.router.topk >= 1 && shape.router.topk <= shape.num_experts,
                name, ": ", shape.num_experts, " experts with top-", shape.router.topk);
  router_ = store.add(name + ".router.weight", {shape.num_experts, hidden}, Init::normal, init_std, true);
  experts_.reserve(static_cast<size_t>(shape.num_experts));
  for (int64_t e = 0; e < shape.num_experts; ++e) {
    const int first = static_cast<int>(store.parameters().size());
    experts_.emplace_back(store, name + ".experts." + std::to_string(e), hidden, shape.expert_ffn_hidden_size,
                          init_std, output_init_std, tp, mlp);
    for (int i = first; i < static_cast<int>(store.parameters().size()); ++i)
      store.roles(i).reduce_group = ReduceGroup::expert_data;
  }
  if (shape.shared_ffn_hidden_size > 0)
    shared_ = std::make_unique<MLP>(store, name + ".shared_experts", hidden, shape.shared_ffn_hidden_size, init_std,
                                    output_init_std, tp, mlp);
}

Tensor MoeLayer::forward(Arena& arena, const Tensor& in, Saved& saved) const {
  if (!in.device().is_cpu() || in.dtype() != DType::f32)
    TESSERA_CONFIG_FAIL(name_, ": model.num_experts = ", shape_.num_experts,
                        " runs on the CPU in fp32 only for now (got ", in.describe(),
                        "); set training.device = cpu and training.precision = fp32");
  TESSERA_CHECK(in.ndim() == 2, name_, ": input must be [tokens, h], got ", in.describe());
  const int64_t n = in.dim(0), h = in.dim(1);
  saved.in = in;
  saved.logits = arena.allocate(DType::f32, {n, shape_.num_experts});
  ops::linear_forward(in, store_->value(router_), Tensor(), saved.logits);
  saved.routing = ops::moe_router_forward(saved.logits, shape_.router);
  saved.routed = saved.routing.routed_per_expert();
  saved.aux_loss = ops::moe_aux_loss_forward(saved.logits, saved.routed, shape_.router.topk, shape_.router.score);
  saved.z_loss = ops::moe_z_loss_forward(saved.logits);
  int64_t pad_to = 0;
  if (shape_.capacity_factor > 0) {
    const int64_t capacity = ops::moe_expert_capacity(n, shape_.router.topk, shape_.num_experts, shape_.capacity_factor);
    saved.dropped = ops::moe_drop_over_capacity(saved.routing, capacity);
    if (shape_.pad_to_capacity) pad_to = capacity;
  }
  saved.permutation = ops::moe_make_permutation(saved.routing, pad_to);
  const ops::Permutation& p = saved.permutation;
  Tensor permuted = arena.allocate(DType::f32, {p.rows(), h});
  ops::moe_permute_forward(in, p, permuted);
  saved.expert_out = arena.allocate(DType::f32, {p.rows(), h});
  saved.experts.assign(experts_.size(), MLP::Saved{});
  int64_t row = 0;
  for (size_t e = 0; e < experts_.size(); ++e) {
    const int64_t rows = p.rows_per_expert[e];
    if (rows > 0) {  // an expert without tokens does nothing (the same on every TP rank: same routing)
      Tensor out = experts_[e].forward(arena, permuted.rows(row, row + rows), saved.experts[e]);
      ops::copy(out, saved.expert_out.rows(row, row + rows));
    }
    row += rows;
  }
  Tensor y = arena.allocate(DType::f32, {n, h});
  ops::moe_unpermute_forward(saved.expert_out, p, saved.routing.probs, y);
  if (shared_) ops::add_inplace(y, shared_->forward(arena, in, saved.shared));
  return y;
}

Tensor MoeLayer::backward(Arena& arena, const Tensor& dout, const Saved& saved, double aux_loss_scale) const {
  const ops::Permutation& p = saved.permutation;
  const int64_t n = saved.in.dim(0), h = saved.in.dim(1);
  Tensor dexpert_out = arena.allocate(DType::f32, {p.rows(), h});
  std::vector<float> dprobs(saved.routing.probs.size());
  ops::moe_unpermute_backward(dout, saved.expert_out, p, saved.routing.probs, dexpert_out, dprobs);
  Tensor dpermuted = arena.allocate(DType::f32, {p.rows(), h});
  int64_t row = 0;
  for (size_t e = 0; e < experts_.size(); ++e) {
    const int64_t rows = p.rows_per_expert[e];
    if (rows > 0) {
      Tensor d = experts_[e].backward(arena, dexpert_out.rows(row, row + rows), saved.experts[e]);
      ops::copy(d, dpermuted.rows(row, row + rows));
    }
    row += rows;
  }
  Tensor dx = arena.allocate(DType::f32, {n, h});
  ops::moe_permute_backward(dpermuted, p, dx);
  Tensor dlogits = arena.allocate(DType::f32, saved.logits.shape());
  ops::moe_router_backward(saved.logits, saved.routing, shape_.router, dprobs, dlogits);
  if (shape_.aux_loss && shape_.aux_loss_coeff > 0)
    ops::moe_aux_loss_backward(saved.logits, saved.routed, shape_.router.topk, shape_.router.score,
                               aux_loss_scale * shape_.aux_loss_coeff, dlogits);
  if (shape_.z_loss_coeff > 0) ops::moe_z_loss_backward(saved.logits, aux_loss_scale * shape_.z_loss_coeff, dlogits);
  Tensor dx_router = arena.allocate(DType::f32, {n, h});
  ops::linear_backward(dlogits, saved.in, store_->value(router_), dx_router, store_->grad(router_), Tensor());
  ops::add_inplace(dx, dx_router);
  if (shared_) ops::add_inplace(dx, shared_->backward(arena, dout, saved.shared));
  return dx;
}

}  // namespace tessera::nn
