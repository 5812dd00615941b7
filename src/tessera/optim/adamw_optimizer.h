// AdamW over a list of parameter entries: owns the step counter and the f32 moments (exp_avg and
// exp_avg_sq) in one contiguous buffer, one view per parameter in entry order; the math is ops::adamw_update.
#pragma once
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/optim/param_groups.h"

namespace tessera::optim {

class AdamWOptimizer {
 public:
  // Every entry: f32 param and grad of one shape, all on one device, unique non-empty names.
  // The moments start at zero and the step counter at 0.
  explicit AdamWOptimizer(std::vector<ParamEntry> params);

  // One AdamW step over every entry: increments the step counter first (the first step uses
  // step 1 for bias correction), then applies weight_decay to entries flagged weight_decay and 0
  // to the others. Grads are read as they are (unscale / clip them before).
  void step(double lr, double weight_decay, double beta1, double beta2, double eps);

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps);  // when loading a checkpoint

  const std::vector<ParamEntry>& params() const { return params_; }
  size_t index_of(std::string_view name) const;  // throws naming the parameter if unknown
  Tensor exp_avg(std::string_view name) const;
  Tensor exp_avg_sq(std::string_view name) const;
  // All moments of one kind as one flat f32 [numel_total] view, entries concatenated in order.
  Tensor exp_avg_flat() const;
  Tensor exp_avg_sq_flat() const;
  int64_t numel_total() const { return numel_total_; }
  size_t state_bytes() const { return state_.size(); }  // both moments

 private:
  std::vector<ParamEntry> params_;
  std::unordered_map<std::string, size_t> index_;
  int64_t numel_total_ = 0;
  Buffer state_;                       // [exp_avg of every entry | exp_avg_sq of every entry], f32
  std::vector<Tensor> exp_avg_;        // views into state_, one per entry
  std::vector<Tensor> exp_avg_sq_;
  int64_t step_count_ = 0;
};

}  // namespace tessera::optim
