#include "tessera/nn/moe_layer.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linear.h"
#include "tessera/ops/moe_aux_loss.h"
#include "tessera/ops/moe_capacity.h"
#include "tessera/tensor_parallel/tp_mappings.h"

namespace tessera::nn {

MoeLayer::MoeLayer(ParameterStore& store, const std::string& name, int64_t hidden, const MoeShape& shape,
                   double init_std, double output_init_std, const parallel::TensorParallel& tp, const MlpOptions& mlp,
                   const ExpertParallel& ep)
    : name_(name), shape_(shape), tp_(tp), store_(&store), ep_(ep) {
  parallel::TensorParallel expert_tp = tp;  // the experts see the gathered tokens (no SP inside)
  expert_tp.sequence_parallel = false;
  TESSERA_CHECK(shape.num_experts > 0 && shape.router.topk >= 1 && shape.router.topk <= shape.num_experts,
                name, ": ", shape.num_experts, " experts with top-", shape.router.topk);
  router_ = store.add(name + ".router.weight", {shape.num_experts, hidden}, Init::normal, init_std, true);
  TESSERA_CHECK(ep.size >= 1 && shape.num_experts % ep.size == 0 && (ep.size == 1 || ep.comm != nullptr), name,
                ": ", shape.num_experts, " experts over ", ep.size, " expert-parallel ranks");
  const int64_t local = shape.num_experts / ep.size;
  mlp_ = mlp;
  first_expert_ = ep.rank * local;
  experts_.reserve(static_cast<size_t>(local));
  for (int64_t e = first_expert_; e < first_expert_ + local; ++e) {
    const int first = static_cast<int>(store.parameters().size());
    experts_.emplace_back(store, name + ".experts." + std::to_string(e), hidden, shape.expert_ffn_hidden_size,
                          init_std, output_init_std, expert_tp, mlp);
    for (int i = first; i < static_cast<int>(store.parameters().size()); ++i)
      store.roles(i).reduce_group = ReduceGroup::expert_data;
  }
  if (shape.shared_ffn_hidden_size > 0)
    shared_ = std::make_unique<MLP>(store, name + ".shared_experts", hidden, shape.shared_ffn_hidden_size, init_std,
                                    output_init_std, expert_tp, mlp);
}

Tensor MoeLayer::forward(Arena& arena, const Tensor& local_in, Saved& saved) const {
  // SP: every token of the TP group (forward all-gather; backward keeps this rank's rows, the
  // gradient being complete on every TP rank).
  const Tensor in = tp_.sequence_parallel ? parallel::gather_from_sp_forward(arena, local_in, tp_) : local_in;
  if (in.device().is_cuda()) {
    const Tensor y = forward_device(arena, in, saved);
    return tp_.sequence_parallel ? parallel::scatter_to_sp_forward(arena, y, tp_) : y;
  }
  if (!in.device().is_cpu() || in.dtype() != DType::f32)
    TESSERA_CONFIG_FAIL(name_, ": model.num_experts = ", shape_.num_experts,
                        " runs on the CPU in fp32 only (got ", in.describe(),
                        "); set training.precision = fp32, or training.device = cuda (docs/moe-gpu.md)");
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
  saved.expert_out = run_experts(arena, permuted, saved, false);
  Tensor y = arena.allocate(DType::f32, {n, h});
  ops::moe_unpermute_forward(saved.expert_out, p, saved.routing.probs, y);
  if (shared_) ops::add_inplace(y, shared_->forward(arena, in, saved.shared));
  return tp_.sequence_parallel ? parallel::scatter_to_sp_forward(arena, y, tp_) : y;
}

Tensor MoeLayer::backward(Arena& arena, const Tensor& local_dout, const Saved& saved, double aux_loss_scale) const {
  const Tensor dout = tp_.sequence_parallel ? parallel::scatter_to_sp_backward(arena, local_dout, tp_) : local_dout;
  if (dout.device().is_cuda()) {
    const Tensor dx = backward_device(arena, dout, saved, aux_loss_scale);
    return tp_.sequence_parallel ? parallel::scatter_to_sp_forward(arena, dx, tp_) : dx;
  }
  const ops::Permutation& p = saved.permutation;
  const int64_t n = saved.in.dim(0), h = saved.in.dim(1);
  Tensor dexpert_out = arena.allocate(DType::f32, {p.rows(), h});
  std::vector<float> dprobs(saved.routing.probs.size());
  ops::moe_unpermute_backward(dout, saved.expert_out, p, saved.routing.probs, dexpert_out, dprobs);
  Tensor dpermuted = run_experts(arena, dexpert_out, const_cast<Saved&>(saved), true);
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
  return tp_.sequence_parallel ? parallel::scatter_to_sp_forward(arena, dx, tp_) : dx;
}

namespace {
// [rows, h] in the arena (f32, or the rows' dtype on a device), rows possibly 0.
Tensor rows_buffer(Arena& arena, int64_t rows, int64_t h, DType dtype = DType::f32) {
  return arena.allocate(dtype, {std::max<int64_t>(rows, 1), h}).rows(0, rows);
}
}  // namespace

Tensor MoeLayer::run_experts(Arena& arena, const Tensor& rows, Saved& saved, bool backward) const {
  const ops::Permutation& p = saved.permutation;
  const int64_t h = rows.dim(1), local = static_cast<int64_t>(experts_.size());
  // One expert's block: forward (saving into saved.experts[j]) or backward.
  auto expert = [&](int64_t j, const Tensor& in, const Tensor& out) {
    if (in.dim(0) == 0) return;  // no tokens: nothing to do (the same on every TP rank: same routing)
    auto& s = saved.experts[static_cast<size_t>(j)];
    Tensor r = backward ? experts_[static_cast<size_t>(j)].backward(arena, in, s)
                        : experts_[static_cast<size_t>(j)].forward(arena, in, s);
    ops::copy(r, out);
  };
  Tensor result = rows_buffer(arena, p.rows(), h, rows.dtype());
  if (!backward) saved.experts.assign(experts_.size(), MLP::Saved{});
  if (ep_.size == 1) {
    int64_t row = 0;
    for (int64_t j = 0; j < local; ++j) {
      const int64_t n = p.rows_per_expert[static_cast<size_t>(j)];
      expert(j, rows.rows(row, row + n), result.rows(row, row + n));
      row += n;
    }
    return result;
  }
  const int ep = ep_.size;
  const int64_t experts = shape_.num_experts;
  if (!backward) {  // every EP rank's rows per expert (backward sends the same shapes back)
    Buffer mine(static_cast<size_t>(experts) * sizeof(int64_t), Device::cpu());
    Buffer all(static_cast<size_t>(experts * ep) * sizeof(int64_t), Device::cpu());
    Tensor mine_t = mine.as_tensor(DType::i64, {experts}), all_t = all.as_tensor(DType::i64, {experts * ep});
    std::copy(p.rows_per_expert.begin(), p.rows_per_expert.end(), mine_t.data_as<int64_t>());
    ep_.comm->all_gather(mine_t, all_t);
    saved.ep_rows.assign(static_cast<size_t>(ep), std::vector<int64_t>(static_cast<size_t>(experts)));
    for (int s = 0; s < ep; ++s)
      for (int64_t e = 0; e < experts; ++e)
        saved.ep_rows[static_cast<size_t>(s)][static_cast<size_t>(e)] = all_t.data_as<int64_t>()[s * experts + e];
  }
  const auto& counts = saved.ep_rows;
  // rows(s, j): rows of source rank s for this rank's local expert j; sent[r]: rows this rank sends to r.
  auto rows_of = [&](int s, int64_t j) { return counts[static_cast<size_t>(s)][static_cast<size_t>(first_expert_ + j)]; };
  std::vector<int64_t> send(static_cast<size_t>(ep), 0), recv(static_cast<size_t>(ep), 0);
  for (int r = 0; r < ep; ++r)
    for (int64_t j = 0; j < local; ++j) send[static_cast<size_t>(r)] += p.rows_per_expert[static_cast<size_t>(r * local + j)];
  int64_t received_rows = 0;
  for (int s = 0; s < ep; ++s) {
    for (int64_t j = 0; j < local; ++j) recv[static_cast<size_t>(s)] += rows_of(s, j);
    received_rows += recv[static_cast<size_t>(s)];
  }
  std::vector<int64_t> send_elements(send), recv_elements(recv);
  for (auto& v : send_elements) v *= h;
  for (auto& v : recv_elements) v *= h;
  // rows (permutation order = [destination rank][its experts]) -> [source rank][local expert].
  Tensor received = rows_buffer(arena, received_rows, h);
  ep_.comm->all_to_all_v(rows.flat(), received.flat(), send_elements, recv_elements);
  // [source][local expert] -> [local expert][source] (each expert's rows contiguous), run, and back.
  std::vector<std::vector<int64_t>> at(static_cast<size_t>(ep), std::vector<int64_t>(static_cast<size_t>(local)));
  int64_t offset = 0;
  for (int s = 0; s < ep; ++s)
    for (int64_t j = 0; j < local; ++j) {
      at[static_cast<size_t>(s)][static_cast<size_t>(j)] = offset;
      offset += rows_of(s, j);
    }
  Tensor grouped = rows_buffer(arena, received_rows, h), grouped_out = rows_buffer(arena, received_rows, h);
  Tensor processed = rows_buffer(arena, received_rows, h);
  int64_t row = 0;
  for (int64_t j = 0; j < local; ++j) {
    const int64_t first = row;
    for (int s = 0; s < ep; ++s) {
      const int64_t n = rows_of(s, j), from = at[static_cast<size_t>(s)][static_cast<size_t>(j)];
      if (n > 0) ops::copy(received.rows(from, from + n), grouped.rows(row, row + n));
      row += n;
    }
    expert(j, grouped.rows(first, row), grouped_out.rows(first, row));
  }
  row = 0;
  for (int64_t j = 0; j < local; ++j)
    for (int s = 0; s < ep; ++s) {
      const int64_t n = rows_of(s, j), to = at[static_cast<size_t>(s)][static_cast<size_t>(j)];
      if (n > 0) ops::copy(grouped_out.rows(row, row + n), processed.rows(to, to + n));
      row += n;
    }
  saved.local_rows = received_rows;
  ep_.comm->all_to_all_v(processed.flat(), result.flat(), recv_elements, send_elements);
  return result;
}

}  // namespace tessera::nn
