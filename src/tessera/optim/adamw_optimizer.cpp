#include "tessera/optim/adamw_optimizer.h"

#include <cmath>

#include "tessera/ops/adamw.h"

namespace tessera::optim {

AdamWOptimizer::AdamWOptimizer(std::vector<ParamEntry> params) : params_(std::move(params)) {
  Device device = params_.empty() ? Device::cpu() : params_.front().param.device();
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamEntry& entry = params_[i];
    TESSERA_CHECK(!entry.name.empty(), "optimizer parameter #", i, " has an empty name");
    TESSERA_CHECK(index_.emplace(entry.name, i).second, "optimizer parameter '", entry.name, "' is listed twice");
    TESSERA_CHECK(entry.param.defined() && entry.grad.defined(), "optimizer parameter '", entry.name,
                  "' has an undefined param or grad tensor");
    TESSERA_CHECK(entry.param.dtype() == DType::f32 && entry.grad.dtype() == DType::f32, "optimizer parameter '",
                  entry.name, "': param and grad must be f32 (main params / main grads), got param ",
                  entry.param.describe(), " and grad ", entry.grad.describe());
    TESSERA_CHECK(entry.param.shape() == entry.grad.shape(), "optimizer parameter '", entry.name,
                  "': grad shape differs: param ", entry.param.describe(), ", grad ", entry.grad.describe());
    TESSERA_CHECK(entry.param.device() == device && entry.grad.device() == device, "optimizer parameter '",
                  entry.name, "' is on ", entry.param.device().name(), " (grad on ", entry.grad.device().name(),
                  ") but the first parameter is on ", device.name(), "; one optimizer serves one device");
    numel_total_ += entry.param.numel();
  }
  const size_t moment_bytes = static_cast<size_t>(numel_total_) * sizeof(float);
  state_ = Buffer(2 * moment_bytes, device);
  size_t offset = 0;
  for (const ParamEntry& entry : params_) {
    exp_avg_.push_back(state_.as_tensor(DType::f32, entry.param.shape(), offset));
    exp_avg_sq_.push_back(state_.as_tensor(DType::f32, entry.param.shape(), moment_bytes + offset));
    offset += entry.param.nbytes();
  }
}

void AdamWOptimizer::step(double lr, double weight_decay, double beta1, double beta2, double eps) {
  TESSERA_CHECK(std::isfinite(lr) && lr >= 0, "AdamW step: lr = ", lr, " must be finite and >= 0");
  TESSERA_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, "AdamW step: weight_decay = ", weight_decay,
                " must be finite and >= 0");
  TESSERA_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "AdamW step: betas (", beta1, ", ", beta2,
                ") must lie in [0, 1)");
  TESSERA_CHECK(std::isfinite(eps) && eps >= 0, "AdamW step: eps = ", eps, " must be finite and >= 0");
  ++step_count_;
  ops::AdamWParams hyper;
  hyper.lr = lr;
  hyper.beta1 = beta1;
  hyper.beta2 = beta2;
  hyper.eps = eps;
  hyper.step = step_count_;
  for (size_t i = 0; i < params_.size(); ++i) {
    hyper.weight_decay = params_[i].weight_decay ? weight_decay : 0.0;
    ops::adamw_update(params_[i].param, params_[i].grad, exp_avg_[i], exp_avg_sq_[i], hyper);
  }
}

void AdamWOptimizer::set_step_count(int64_t steps) {
  TESSERA_CHECK(steps >= 0, "AdamW step count ", steps, " must be >= 0");
  step_count_ = steps;
}

size_t AdamWOptimizer::index_of(std::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) TESSERA_FAIL("the optimizer has no parameter named '", name, "'");
  return it->second;
}

Tensor AdamWOptimizer::exp_avg(std::string_view name) const { return exp_avg_[index_of(name)]; }
Tensor AdamWOptimizer::exp_avg_sq(std::string_view name) const { return exp_avg_sq_[index_of(name)]; }

Tensor AdamWOptimizer::exp_avg_flat() const { return state_.as_tensor(DType::f32, {numel_total_}, 0); }
Tensor AdamWOptimizer::exp_avg_sq_flat() const {
  return state_.as_tensor(DType::f32, {numel_total_}, static_cast<size_t>(numel_total_) * sizeof(float));
}

}  // namespace tessera::optim
