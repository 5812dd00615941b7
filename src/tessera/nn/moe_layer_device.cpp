// MoeLayer on a GPU (EP = 1): the router GEMM in the activations' dtype, the logits cast to f32
// (Megatron keeps router logits in fp32), top-k routing and the token permutation / combine by
// the kernels of ops/moe_device.h, each local expert an nn::MLP on the device (a loop of cuBLASLt
// GEMMs; no grouped GEMM yet). Host work, small and needed to size the expert GEMMs: the chosen
// experts and probs [T*k] and the f32 logits [T, E] come to the host once per forward; there the
// capacity dropping, the permutation indices (moe_make_permutation, as the CPU path) and the
// aux / z losses (values and gradients, ops/moe_aux_loss.h) run, and the indices go back.
// TESSERA_MOE_GROUPED_GEMM=1 (TP = 1) runs the experts' linear layers as grouped GEMMs instead
// (run_experts_grouped: cublasGemmGroupedBatchedEx, bias adds / grads per expert).
// TESSERA_MOE_TIMING=1 synchronises around the sub-steps and prints their total times at exit.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/nn/moe_layer.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linear.h"
#include "tessera/ops/moe_aux_loss.h"
#include "tessera/ops/moe_capacity.h"
#include "tessera/ops/moe_device.h"
#include "tessera/ops/swiglu.h"

namespace tessera::nn {

namespace {

// Sub-step timings (TESSERA_MOE_TIMING=1), seconds summed over every call.
struct MoeTiming {
  enum Step { router_fwd, permute_fwd, experts_fwd, unpermute_fwd, unpermute_bwd, experts_bwd, permute_bwd,
              router_bwd, steps };
  static constexpr const char* kNames[steps] = {"router_fwd",    "permute_fwd", "experts_fwd", "unpermute_fwd",
                                                "unpermute_bwd", "experts_bwd", "permute_bwd", "router_bwd"};
  double seconds[steps] = {};
  long calls = 0;
  static MoeTiming* get() {
    static MoeTiming* t = [] {
      const char* v = std::getenv("TESSERA_MOE_TIMING");
      if (!v || std::string(v) == "0") return static_cast<MoeTiming*>(nullptr);
      auto* timing = new MoeTiming;
      std::atexit([] { MoeTiming::get()->print(); });
      return timing;
    }();
    return t;
  }
  void print() const {
    double total = 0;
    for (double s : seconds) total += s;
    std::fprintf(stderr, "[moe timing] %ld layer forwards; total MoE layer time %.3f s\n", calls, total);
    for (int i = 0; i < steps; ++i)
      std::fprintf(stderr, "[moe timing] %-14s %9.3f s %6.2f%%\n", kNames[i], seconds[i],
                   total > 0 ? 100.0 * seconds[i] / total : 0.0);
  }
};

// Times one sub-step when timing is on (device synchronised at both ends).
class StepTimer {
 public:
  StepTimer(Device device, MoeTiming::Step step) : timing_(MoeTiming::get()), device_(device), step_(step) {
    if (timing_) {
      ops::synchronize(device_);
      start_ = std::chrono::steady_clock::now();
    }
  }
  ~StepTimer() {
    if (!timing_) return;
    ops::synchronize(device_);
    timing_->seconds[step_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  MoeTiming* timing_;
  Device device_;
  MoeTiming::Step step_;
  std::chrono::steady_clock::time_point start_;
};

template <typename T>
Tensor host_view(std::vector<T>& v, Shape shape) {
  return Tensor(v.data(), dtype_of<T>(), std::move(shape), Device::cpu());
}

// A device copy of a host vector (at least one element allocated).
template <typename T>
Tensor upload(Arena& arena, std::vector<T>& v) {
  const auto n = static_cast<int64_t>(v.size());
  Tensor d = arena.allocate(dtype_of<T>(), {std::max<int64_t>(n, 1)}).rows(0, n);
  if (n > 0) ops::copy(host_view(v, {n}), d);
  return d;
}

// f32 view of t (t itself, or a converted copy in the arena).
Tensor as_dtype(Arena& arena, const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = arena.allocate(dtype, t.shape());
  ops::copy(t, out);
  return out;
}

bool grouped_gemm_requested() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_MOE_GROUPED_GEMM");
    return v && std::string(v) != "0";
  }();
  return on;
}

}  // namespace

Tensor MoeLayer::run_experts_grouped(Arena& arena, const Tensor& rows, Saved& saved, bool backward) const {
  const std::vector<int64_t>& counts = saved.permutation.rows_per_expert;
  const int64_t r = rows.dim(0), h = rows.dim(1), experts = static_cast<int64_t>(experts_.size());
  const DType dt = rows.dtype();
  std::vector<Tensor> w1, b1, w2, b2, dw1, db1, dw2, db2;
  for (int64_t e = first_expert_; e < first_expert_ + experts; ++e) {
    const std::string base = name_ + ".experts." + std::to_string(e);
    auto add = [&](const std::string& name, std::vector<Tensor>& value, std::vector<Tensor>& grad) {
      const int i = store_->index_of(base + name);
      TESSERA_CHECK(i >= 0, name_, ": no parameter ", base + name);
      value.push_back(store_->value(i));
      grad.push_back(store_->grad(i));
    };
    add(".linear_fc1.weight", w1, dw1);
    add(".linear_fc2.weight", w2, dw2);
    if (mlp_.bias) {
      add(".linear_fc1.bias", b1, db1);
      add(".linear_fc2.bias", b2, db2);
    }
  }
  const int64_t f1 = w1.at(0).dim(0), f = mlp_.swiglu ? f1 / 2 : f1;
  auto buffer = [&](int64_t cols) { return arena.allocate(dt, {std::max<int64_t>(r, 1), cols}).rows(0, r); };
  if (!backward) {
    Tensor fc1 = buffer(f1), activation = buffer(f), out = buffer(h);
    if (r > 0) {
      ops::moe_grouped_linear_forward(rows, w1, b1, counts, fc1);
      if (mlp_.swiglu) ops::swiglu_forward(fc1, activation);
      else if (mlp_.gelu_erf) ops::activation_forward(ops::Activation::gelu_erf, fc1, activation);
      else ops::gelu_forward(fc1, activation);
      ops::moe_grouped_linear_forward(activation, w2, b2, counts, out);
    }
    saved.grouped_in = rows, saved.grouped_fc1 = fc1, saved.grouped_activation = activation;
    return out;
  }
  Tensor dactivation = buffer(f), dfc1 = buffer(f1), din = buffer(h);
  if (r > 0) {
    ops::moe_grouped_linear_backward(rows, saved.grouped_activation, w2, counts, dactivation, dw2, db2);
    if (mlp_.swiglu) ops::swiglu_backward(dactivation, saved.grouped_fc1, dfc1);
    else if (mlp_.gelu_erf) ops::activation_backward(ops::Activation::gelu_erf, dactivation, saved.grouped_fc1, dfc1);
    else ops::gelu_backward(dactivation, saved.grouped_fc1, dfc1);
    ops::moe_grouped_linear_backward(dfc1, saved.grouped_in, w1, counts, din, dw1, db1);
  }
  return din;
}

Tensor MoeLayer::forward_device(Arena& arena, const Tensor& in, Saved& saved) const {
  TESSERA_CHECK(in.ndim() == 2, name_, ": input must be [tokens, h], got ", in.describe());
  if (ep_.size > 1)
    TESSERA_CONFIG_FAIL(name_, ": parallel.expert_model_parallel_size = ", ep_.size,
                        " is not supported with training.device = cuda yet (the GPU MoE layer runs EP = 1)");
  const Device device = in.device();
  const int64_t n = in.dim(0), h = in.dim(1), experts = shape_.num_experts, k = shape_.router.topk;
  if (MoeTiming* t = MoeTiming::get()) ++t->calls;
  saved.in = in;
  ops::Routing& r = saved.routing;
  {
    StepTimer timer(device, MoeTiming::router_fwd);
    Tensor logits = arena.allocate(in.dtype(), {n, experts});
    ops::linear_forward(in, store_->value(router_), Tensor(), logits);
    saved.logits = as_dtype(arena, logits, DType::f32);
    saved.experts_dev = arena.allocate(DType::i32, {std::max<int64_t>(n * k, 1)}).rows(0, n * k);
    saved.probs_dev = arena.allocate(DType::f32, {std::max<int64_t>(n * k, 1)}).rows(0, n * k);
    ops::moe_router_forward_device(saved.logits, shape_.router, saved.experts_dev, saved.probs_dev);
    // The routing on the host: it sizes the expert GEMMs and feeds the aux-loss statistics.
    r = ops::Routing{};
    r.tokens = n, r.topk = k, r.num_experts = experts;
    r.experts.resize(static_cast<size_t>(n * k));
    r.probs.resize(r.experts.size());
    r.kept.assign(r.experts.size(), 1);
    saved.logits_host.resize(static_cast<size_t>(n * experts));
    if (n > 0) {
      ops::copy(saved.experts_dev, host_view(r.experts, {n * k}));
      ops::copy(saved.probs_dev, host_view(r.probs, {n * k}));
      ops::copy(saved.logits, host_view(saved.logits_host, {n, experts}));
    }
    saved.routed = r.routed_per_expert();
    const Tensor logits_host = host_view(saved.logits_host, {n, experts});
    saved.aux_loss = ops::moe_aux_loss_forward(logits_host, saved.routed, k, shape_.router.score);
    saved.z_loss = ops::moe_z_loss_forward(logits_host);
    int64_t pad_to = 0;
    saved.dropped = 0;
    if (shape_.capacity_factor > 0) {
      const int64_t capacity = ops::moe_expert_capacity(n, k, experts, shape_.capacity_factor);
      saved.dropped = ops::moe_drop_over_capacity(r, capacity);
      if (shape_.pad_to_capacity) pad_to = capacity;
      if (saved.dropped > 0) saved.probs_dev = upload(arena, r.probs);  // dropped slots weigh 0
    }
    saved.permutation = ops::moe_make_permutation(r, pad_to);
    std::vector<int64_t> slot_row = ops::moe_slot_rows(saved.permutation);
    saved.row_slot_dev = upload(arena, saved.permutation.row_slot);
    saved.slot_row_dev = upload(arena, slot_row);
  }
  const ops::Permutation& p = saved.permutation;
  Tensor permuted = arena.allocate(in.dtype(), {std::max<int64_t>(p.rows(), 1), h}).rows(0, p.rows());
  {
    StepTimer timer(device, MoeTiming::permute_fwd);
    ops::moe_permute_forward_device(in, saved.row_slot_dev, k, permuted);
  }
  {
    StepTimer timer(device, MoeTiming::experts_fwd);
    saved.expert_out = grouped_gemm_requested() && tp_.size == 1 ? run_experts_grouped(arena, permuted, saved, false)
                                                                  : run_experts(arena, permuted, saved, false);
  }
  Tensor y = arena.allocate(in.dtype(), {n, h});
  {
    StepTimer timer(device, MoeTiming::unpermute_fwd);
    ops::moe_unpermute_forward_device(saved.expert_out, saved.slot_row_dev, saved.probs_dev, y);
  }
  if (shared_) ops::add_inplace(y, shared_->forward(arena, in, saved.shared));
  return y;
}

Tensor MoeLayer::backward_device(Arena& arena, const Tensor& dout, const Saved& saved, double aux_loss_scale) const {
  const ops::Permutation& p = saved.permutation;
  const Device device = dout.device();
  const int64_t n = saved.in.dim(0), h = saved.in.dim(1), experts = shape_.num_experts, k = shape_.router.topk;
  Tensor dexpert_out = arena.allocate(dout.dtype(), {std::max<int64_t>(p.rows(), 1), h}).rows(0, p.rows());
  Tensor dprobs = arena.allocate(DType::f32, {std::max<int64_t>(n * k, 1)}).rows(0, n * k);
  {
    StepTimer timer(device, MoeTiming::unpermute_bwd);
    ops::moe_unpermute_backward_device(dout, saved.expert_out, saved.row_slot_dev, saved.probs_dev, dexpert_out,
                                       dprobs);
  }
  Tensor dpermuted;
  {
    StepTimer timer(device, MoeTiming::experts_bwd);
    Saved& s = const_cast<Saved&>(saved);
    dpermuted = grouped_gemm_requested() && tp_.size == 1 ? run_experts_grouped(arena, dexpert_out, s, true)
                                                         : run_experts(arena, dexpert_out, s, true);
  }
  Tensor dx = arena.allocate(dout.dtype(), {n, h});
  {
    StepTimer timer(device, MoeTiming::permute_bwd);
    ops::moe_permute_backward_device(dpermuted, saved.slot_row_dev, dx);
  }
  Tensor dx_router = arena.allocate(dout.dtype(), {n, h});
  {
    StepTimer timer(device, MoeTiming::router_bwd);
    Tensor dlogits = arena.allocate(DType::f32, {n, experts});
    ops::moe_router_backward_device(saved.logits, saved.experts_dev, shape_.router, dprobs, dlogits);
    const bool aux = shape_.aux_loss && shape_.aux_loss_coeff > 0, z = shape_.z_loss_coeff > 0;
    if ((aux || z) && n > 0) {  // the losses' gradients on the host, added on the device
      std::vector<float> host(static_cast<size_t>(n * experts), 0.0f);
      const Tensor logits_host = host_view(const_cast<std::vector<float>&>(saved.logits_host), {n, experts});
      const Tensor dl_host = host_view(host, {n, experts});
      if (aux)
        ops::moe_aux_loss_backward(logits_host, saved.routed, k, shape_.router.score,
                                   aux_loss_scale * shape_.aux_loss_coeff, dl_host);
      if (z) ops::moe_z_loss_backward(logits_host, aux_loss_scale * shape_.z_loss_coeff, dl_host);
      ops::add_inplace(dlogits, upload(arena, host).view({n, experts}));
    }
    const Tensor dlogits_c = as_dtype(arena, dlogits, dout.dtype());
    ops::linear_backward(dlogits_c, saved.in, store_->value(router_), dx_router, store_->grad(router_), Tensor());
  }
  ops::add_inplace(dx, dx_router);
  if (shared_) ops::add_inplace(dx, shared_->backward(arena, dout, saved.shared));
  return dx;
}

}  // namespace tessera::nn
