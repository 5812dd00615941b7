// Loss scaling for fp16 training (Megatron DynamicGradScaler): the scale the loss is multiplied by
// before backward, backed off on overflow (with hysteresis) and grown after an interval of clean steps.
#pragma once
#include <cstdint>

namespace tessera::optim {

struct GradScalerConfig {
  double initial_scale = 4294967296.0;  // 2^32
  double min_scale = 1.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 1000;  // Megatron --loss-scale-window
  int64_t hysteresis = 2;
};

// Megatron's update rule:
//   found_inf: growth_tracker = 0; hysteresis_tracker -= 1; if <= 0: scale = max(scale * backoff, min)
//   else:      growth_tracker += 1; if == interval: growth_tracker = 0, hysteresis_tracker = hysteresis,
//              scale *= growth
class DynamicGradScaler {
 public:
  explicit DynamicGradScaler(GradScalerConfig config = {});
  double scale() const { return scale_; }
  double inverse_scale() const { return 1.0 / scale_; }
  void update(bool found_inf);

  // Checkpoint state {scale, growth_tracker, hysteresis_tracker}.
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t hysteresis_tracker() const { return hysteresis_tracker_; }
  void load_state(double scale, int64_t growth_tracker, int64_t hysteresis_tracker);
  const GradScalerConfig& config() const { return config_; }

 private:
  GradScalerConfig config_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_tracker_;
};

}  // namespace tessera::optim
