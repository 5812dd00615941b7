#include "tessera/optim/grad_scaler.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::optim {

DynamicGradScaler::DynamicGradScaler(GradScalerConfig config)
    : config_(config), scale_(config.initial_scale), hysteresis_tracker_(config.hysteresis) {
  TESSERA_CHECK(std::isfinite(config_.initial_scale) && config_.initial_scale > 0, "grad scaler: initial scale ",
                config_.initial_scale, " must be finite and > 0");
  TESSERA_CHECK(config_.min_scale > 0 && config_.min_scale <= config_.initial_scale, "grad scaler: min scale ",
                config_.min_scale, " must lie in (0, initial scale ", config_.initial_scale, "]");
  TESSERA_CHECK(config_.growth_factor > 1, "grad scaler: growth factor ", config_.growth_factor, " must be > 1");
  TESSERA_CHECK(config_.backoff_factor > 0 && config_.backoff_factor < 1, "grad scaler: backoff factor ",
                config_.backoff_factor, " must lie in (0, 1)");
  TESSERA_CHECK(config_.growth_interval > 0, "grad scaler: growth interval ", config_.growth_interval,
                " must be > 0");
  TESSERA_CHECK(config_.hysteresis > 0, "grad scaler: hysteresis ", config_.hysteresis, " must be > 0");
}

void DynamicGradScaler::update(bool found_inf) {
  if (found_inf) {
    growth_tracker_ = 0;
    hysteresis_tracker_ -= 1;
    if (hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * config_.backoff_factor, config_.min_scale);
    return;
  }
  growth_tracker_ += 1;
  if (growth_tracker_ == config_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = config_.hysteresis;
    scale_ *= config_.growth_factor;
  }
}

void DynamicGradScaler::load_state(double scale, int64_t growth_tracker, int64_t hysteresis_tracker) {
  TESSERA_CHECK(std::isfinite(scale) && scale > 0, "grad scaler state: scale ", scale, " must be finite and > 0");
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  hysteresis_tracker_ = hysteresis_tracker;
}

}  // namespace tessera::optim
