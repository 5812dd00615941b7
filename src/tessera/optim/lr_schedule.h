// Learning-rate schedule with Megatron's OptimizerParamScheduler semantics (linear warm-up from
// lr_warmup_init, then constant | linear | cosine | inverse-square-root | wsd decay to min_lr).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::optim {

enum class LrDecayStyle { constant, linear, cosine, inverse_square_root, wsd };
// Shape of the final (annealing) phase of a WSD schedule; Megatron's default is exponential.
enum class WsdDecayStyle { exponential, linear, cosine, minus_sqrt };

// Parse / print the [optimizer] spellings. Unknown names throw ConfigError naming
// optimizer.lr_decay_style / optimizer.lr_wsd_decay_style and listing the allowed values.
// "WSD" (Megatron's spelling) is accepted as an alias of "wsd".
LrDecayStyle lr_decay_style_from_name(std::string_view name);
std::string_view lr_decay_style_name(LrDecayStyle style);
WsdDecayStyle wsd_decay_style_from_name(std::string_view name);
std::string_view wsd_decay_style_name(WsdDecayStyle style);

// The [optimizer] keys that shape the learning rate, counted in iterations (optimizer steps).
// TOML keys: lr_decay_style, lr, min_lr, lr_warmup_init, lr_warmup_iters, lr_decay_iters,
// lr_wsd_decay_iters, lr_wsd_decay_style.
struct LrScheduleConfig {
  std::string style = "cosine";
  double lr = 6.0e-4;              // peak (Megatron's max_lr)
  double min_lr = 0.0;
  double warmup_init = 0.0;        // lr at iteration 0 of the warm-up (Megatron --lr-warmup-init, default 0)
  int64_t warmup_iters = 0;
  int64_t decay_iters = 1;         // the trainer sets this to train_iters when the user leaves it unset
  int64_t wsd_decay_iters = 0;     // wsd only: length of the annealing phase at the end of decay_iters
  std::string wsd_decay_style = "exponential";

  // Throws ConfigError naming optimizer.<key>; mirrors Megatron's asserts: 0 <= min_lr <= lr,
  // warmup_init <= lr, decay_iters > 0, 0 <= warmup_iters < decay_iters, 0 <= wsd_decay_iters <= decay_iters.
  void validate() const;
};

// lr(n) where n = number of optimizer steps completed so far: the step of iteration k (1-based)
// uses lr(k - 1), exactly as Megatron, which sets the lr with step(0) at construction and advances
// the scheduler after each successful optimizer step.
//
// Megatron counts the scheduler in samples (n_samples = n * global_batch_size, and so warmup and
// decay lengths). For a constant global batch every ratio is the same, so lr(n) equals Megatron's
// value, with one exception: inverse-square-root with warmup_iters = 0 uses max(warmup, 1) = one
// *sample* in Megatron, giving lr / sqrt(n * gbs) instead of lr / sqrt(n). lr_at_samples() gives
// Megatron's sample-counted value exactly when that matters.
class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleConfig& config);  // validates

  double lr(int64_t iteration) const;
  double lr_at_samples(int64_t consumed_samples, int64_t global_batch_size) const;

  const LrScheduleConfig& config() const { return config_; }
  LrDecayStyle style() const { return style_; }
  WsdDecayStyle wsd_decay_style() const { return wsd_style_; }

 private:
  // Megatron's get_lr with every length in the same unit (iterations, or samples).
  double lr_in_steps(int64_t num_steps, int64_t warmup_steps, int64_t decay_steps, int64_t wsd_decay_steps) const;

  LrScheduleConfig config_;
  LrDecayStyle style_;
  WsdDecayStyle wsd_style_;
};

}  // namespace tessera::optim
