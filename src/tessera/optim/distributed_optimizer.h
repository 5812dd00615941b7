// The optimizer of data-parallel and mixed-precision training (Megatron DistributedOptimizer /
// MixedPrecisionOptimizer, spec 7.2-7.7): reduces the gradients over DP into the fp32 GradBuffer,
// keeps fp32 main params and AdamW moments for the elements this rank owns (its DP shard of every
// bucket with use_distributed_optimizer, else everything), unscales fp16 gradients and skips steps
// that overflowed, computes the global gradient norm over TP, PP and DP counting every gradient
// once, clips, steps, and writes the updated params back into the model (all-gathered over DP).
// The owned segments run as multi-segment ops (ops/multi_tensor.h): on CUDA a step is a handful
// of launches and one host synchronisation (reading the grad norm and the overflow flag).
#pragma once
#include <memory>
#include <vector>

#include "tessera/nn/parameter_store.h"
#include "tessera/ops/multi_tensor.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/distributed/data_parallel.h"
#include "tessera/distributed/grad_buffer.h"
#include "tessera/runtime/parallel_context.h"

namespace tessera::optim {

struct DistributedOptimizerOptions {
  bool shard_over_data_parallel = false;  // ZeRO-1 (use_distributed_optimizer)
  bool dynamic_loss_scaling = false;      // fp16
  GradScalerConfig scaler;
  int64_t bucket_size = 0;                // elements per gradient bucket; 0: one bucket
  std::vector<std::string> own_bucket;    // parameters bucketed alone (tied embedding with pp > 1)
};

struct OptimizerStepResult {
  double grad_norm = 0;    // global L2 norm of the unscaled gradients, before clipping
  bool skipped = false;    // fp16 overflow (inf/nan gradient): no update, scale backed off
  double loss_scale = 1;   // the scale this step's loss gradients carried
};

// One element range of one parameter that this rank owns.
struct OwnedSegment {
  int param = 0;            // index in the ParameterStore
  int64_t param_offset = 0; // first element within the parameter
  int64_t buffer_offset = 0;// first element in the GradBuffer
  int64_t local_offset = 0; // first element in this rank's main-param / moment buffers
  int64_t numel = 0;
};

class DistributedOptimizer {
 public:
  // weight_decay[i] / counted_in_grad_norm[i]: per parameter of the store (registration order).
  DistributedOptimizer(nn::ParameterStore& store, parallel::ParallelContext& context,
                       const DistributedOptimizerOptions& options, std::vector<bool> weight_decay,
                       std::vector<bool> counted_in_grad_norm);

  // The factor each micro-batch's loss gradient must carry (the loss scale; 1 without fp16).
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  // After forward_backward: reduce over DP, unscale, overflow check, global norm, clip, AdamW on
  // the owned elements, write back and all-gather the params.
  // During the step's last backward: parameters [begin, end) of the store have their final gradients.
  // Every bucket whose parameters are all final is reduced over DP right away (overlapping the rest
  // of the backward); step() reduces the others. Optional: without calls, step() reduces everything.
  void gradients_final(int begin, int end);
  OptimizerStepResult step(double lr, double weight_decay, double beta1, double beta2, double eps,
                           double clip_grad);

  int64_t step_count() const { return step_count_; }
  // Restores the AdamW step count (bias correction) when resuming from a checkpoint.
  void set_step_count(int64_t steps);
  const std::vector<OwnedSegment>& segments() const { return segments_; }
  const parallel::GradBuffer& grad_buffer() const { return *grad_buffer_; }
  // The fp16 dynamic loss scaler; nullptr without dynamic loss scaling.
  const DynamicGradScaler* scaler() const { return scaler_.get(); }
  DynamicGradScaler* scaler() { return scaler_.get(); }  // to restore its state from a checkpoint
  int64_t local_numel() const { return local_numel_; }  // owned elements incl. padding
  // Bytes allocated for fp32 main params + exp_avg + exp_avg_sq on this rank (the state buffer).
  size_t state_bytes() const { return state_.size(); }
  Tensor main_params() const;   // f32 [local_numel]
  Tensor exp_avg() const;       // f32 [local_numel]
  Tensor exp_avg_sq() const;    // f32 [local_numel]

 private:
  // Unscales the owned grads (unscale != 1), then the global (sum over ranks) of {sum of squares of
  // counted grads, non-finite grads found}: the step's one host synchronisation.
  void global_grad_stats(double unscale, double& norm_sq, bool& found_inf);
  // After segmented_adamw wrote the owned params (sharded: into the gather buffer): all-gather over
  // DP and copy every parameter into the model.
  void write_back_params();
  void build_segment_tables();
  int64_t store_value_offset(int param) const;  // element offset of a parameter in store_.all_values()

  nn::ParameterStore& store_;
  parallel::ParallelContext& context_;
  DistributedOptimizerOptions options_;
  std::vector<bool> weight_decay_, counted_;
  bool norm_over_world_ = false;  // MoE without sharding: the grad norm sums over the world (constructor)
  std::unique_ptr<parallel::GradBuffer> grad_buffer_;
  std::unique_ptr<parallel::DataParallelGradReducer> reducer_;
  std::unique_ptr<DynamicGradScaler> scaler_;
  std::vector<OwnedSegment> segments_;
  int64_t local_numel_ = 0;
  Buffer state_;          // [main params | exp_avg | exp_avg_sq], f32, local_numel_ each
  Buffer gather_buffer_;  // params in the GradBuffer layout, model dtype (sharded only)
  // Segment tables over the owned segments (built and uploaded once):
  ops::SegmentTable stats_table_;   // src: GradBuffer offset; flags: counted in the norm
  ops::SegmentTable adamw_table_;   // src: GradBuffer, state: local offset, dst: model param or gather buffer
  ops::SegmentTable gather_to_model_table_;  // sharded: every parameter, gather buffer -> model param
  Buffer stats_device_;  // f64 [2] local stats, then f32 [3] packed for the all-reduce (store's device)
  Buffer stats_host_;    // the host copy of the same layout
  int64_t step_count_ = 0;
  std::vector<int> bucket_pending_;  // per bucket: parameters whose gradients are not final yet
};

// Which parameters' gradients this rank counts in the global norm (spec 7.7): not the shared
// duplicate of a tied embedding (ParameterRoles::copy_of: the last stage's output layer), and
// either tensor-parallel-partitioned or on TP rank 0 (a replicated parameter counts once).
std::vector<bool> grad_norm_counted_params(const nn::ParameterStore& store, int tp_size, int tp_rank);
// Whether a parameter is split over TP (ParameterStore metadata when present, else Megatron's GPT rule).
bool is_tensor_parallel_parameter(const nn::Parameter& p, int tp_size);

}  // namespace tessera::optim

namespace tessera::optim {
// The model's parameter dtype for training.precision: fp32 -> f32, bf16 -> bf16, fp16 -> f16.
DType model_param_dtype(const std::string& precision);
}  // namespace tessera::optim
