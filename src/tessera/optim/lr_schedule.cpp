#include "tessera/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tessera/core/error.h"

namespace tessera::optim {

namespace {
constexpr const char* kAllowedStyles = "constant, linear, cosine, inverse-square-root, wsd";
constexpr const char* kAllowedWsdStyles = "exponential, linear, cosine, minus_sqrt";
}  // namespace

LrDecayStyle lr_decay_style_from_name(std::string_view name) {
  if (name == "constant") return LrDecayStyle::constant;
  if (name == "linear") return LrDecayStyle::linear;
  if (name == "cosine") return LrDecayStyle::cosine;
  if (name == "inverse-square-root") return LrDecayStyle::inverse_square_root;
  if (name == "wsd" || name == "WSD") return LrDecayStyle::wsd;
  TESSERA_CONFIG_FAIL("optimizer.lr_decay_style: unknown style '", name, "'; allowed: ", kAllowedStyles);
}

std::string_view lr_decay_style_name(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::constant: return "constant";
    case LrDecayStyle::linear: return "linear";
    case LrDecayStyle::cosine: return "cosine";
    case LrDecayStyle::inverse_square_root: return "inverse-square-root";
    case LrDecayStyle::wsd: return "wsd";
  }
  return "unknown";
}

WsdDecayStyle wsd_decay_style_from_name(std::string_view name) {
  if (name == "exponential") return WsdDecayStyle::exponential;
  if (name == "linear") return WsdDecayStyle::linear;
  if (name == "cosine") return WsdDecayStyle::cosine;
  if (name == "minus_sqrt") return WsdDecayStyle::minus_sqrt;
  TESSERA_CONFIG_FAIL("optimizer.lr_wsd_decay_style: unknown style '", name, "'; allowed: ", kAllowedWsdStyles);
}

std::string_view wsd_decay_style_name(WsdDecayStyle style) {
  switch (style) {
    case WsdDecayStyle::exponential: return "exponential";
    case WsdDecayStyle::linear: return "linear";
    case WsdDecayStyle::cosine: return "cosine";
    case WsdDecayStyle::minus_sqrt: return "minus_sqrt";
  }
  return "unknown";
}

void LrScheduleConfig::validate() const {
  LrDecayStyle decay_style = lr_decay_style_from_name(style);
  wsd_decay_style_from_name(wsd_decay_style);
  if (!std::isfinite(lr) || lr < 0)
    TESSERA_CONFIG_FAIL("optimizer.lr = ", lr, ": must be a finite number >= 0");
  if (!std::isfinite(min_lr) || min_lr < 0)
    TESSERA_CONFIG_FAIL("optimizer.min_lr = ", min_lr, ": must be a finite number >= 0");
  if (min_lr > lr)
    TESSERA_CONFIG_FAIL("optimizer.min_lr = ", min_lr, " is larger than optimizer.lr = ", lr,
                        "; min_lr must be <= lr");
  if (!std::isfinite(warmup_init) || warmup_init < 0 || warmup_init > lr)
    TESSERA_CONFIG_FAIL("optimizer.lr_warmup_init = ", warmup_init, ": must be in [0, optimizer.lr = ", lr, "]");
  if (decay_iters <= 0)
    TESSERA_CONFIG_FAIL("optimizer.lr_decay_iters = ", decay_iters, ": must be > 0 (it defaults to train_iters)");
  if (warmup_iters < 0)
    TESSERA_CONFIG_FAIL("optimizer.lr_warmup_iters = ", warmup_iters, ": must be >= 0");
  if (warmup_iters >= decay_iters)
    TESSERA_CONFIG_FAIL("optimizer.lr_decay_iters = ", decay_iters, " must be larger than optimizer.lr_warmup_iters = ",
                        warmup_iters, " (the decay count includes the warm-up)");
  if (wsd_decay_iters < 0)
    TESSERA_CONFIG_FAIL("optimizer.lr_wsd_decay_iters = ", wsd_decay_iters, ": must be >= 0");
  if (decay_style == LrDecayStyle::wsd && wsd_decay_iters > decay_iters)
    TESSERA_CONFIG_FAIL("optimizer.lr_wsd_decay_iters = ", wsd_decay_iters,
                        " is larger than optimizer.lr_decay_iters = ", decay_iters,
                        "; the annealing phase is the last lr_wsd_decay_iters of lr_decay_iters");
}

LrSchedule::LrSchedule(const LrScheduleConfig& config) : config_(config) {
  config_.validate();
  style_ = lr_decay_style_from_name(config_.style);
  wsd_style_ = wsd_decay_style_from_name(config_.wsd_decay_style);
}

double LrSchedule::lr(int64_t iteration) const {
  TESSERA_CHECK(iteration >= 0, "learning rate asked for negative iteration ", iteration);
  return lr_in_steps(iteration, config_.warmup_iters, config_.decay_iters, config_.wsd_decay_iters);
}

double LrSchedule::lr_at_samples(int64_t consumed_samples, int64_t global_batch_size) const {
  TESSERA_CHECK(consumed_samples >= 0 && global_batch_size > 0, "lr_at_samples(", consumed_samples, ", ",
                global_batch_size, "): samples must be >= 0 and the global batch > 0");
  return lr_in_steps(consumed_samples, config_.warmup_iters * global_batch_size,
                     config_.decay_iters * global_batch_size, config_.wsd_decay_iters * global_batch_size);
}

double LrSchedule::lr_in_steps(int64_t num_steps, int64_t warmup_steps, int64_t decay_steps,
                               int64_t wsd_decay_steps) const {
  const double max_lr = config_.lr;
  const double min_lr = config_.min_lr;
  // Linear warm-up from warmup_init, reaching max_lr at num_steps == warmup_steps.
  if (warmup_steps > 0 && num_steps <= warmup_steps)
    return config_.warmup_init +
           (max_lr - config_.warmup_init) * static_cast<double>(num_steps) / static_cast<double>(warmup_steps);
  if (style_ == LrDecayStyle::constant) return max_lr;
  if (num_steps > decay_steps) return min_lr;
  if (style_ == LrDecayStyle::inverse_square_root) {
    double warmup = static_cast<double>(std::max<int64_t>(warmup_steps, 1));
    double steps = static_cast<double>(std::max<int64_t>(num_steps, 1));
    return std::max(min_lr, max_lr * std::sqrt(warmup) / std::sqrt(steps));
  }
  const double decay_ratio =
      static_cast<double>(num_steps - warmup_steps) / static_cast<double>(decay_steps - warmup_steps);
  const double delta_lr = max_lr - min_lr;
  double coeff = 1.0;
  switch (style_) {
    case LrDecayStyle::linear: coeff = 1.0 - decay_ratio; break;
    case LrDecayStyle::cosine: coeff = 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0); break;
    case LrDecayStyle::wsd: {
      const int64_t anneal_start = decay_steps - wsd_decay_steps;
      if (num_steps <= anneal_start) break;  // stable phase: coeff 1
      const double q = static_cast<double>(num_steps - anneal_start) / static_cast<double>(wsd_decay_steps);
      switch (wsd_style_) {
        case WsdDecayStyle::linear: coeff = 1.0 - q; break;
        case WsdDecayStyle::cosine: coeff = 0.5 * (std::cos(std::numbers::pi * q) + 1.0); break;
        case WsdDecayStyle::exponential: coeff = 2.0 * std::pow(0.5, q) - 1.0; break;
        case WsdDecayStyle::minus_sqrt: coeff = 1.0 - std::sqrt(q); break;
      }
      break;
    }
    case LrDecayStyle::constant:
    case LrDecayStyle::inverse_square_root: break;  // handled above
  }
  return min_lr + coeff * delta_lr;
}

}  // namespace tessera::optim
