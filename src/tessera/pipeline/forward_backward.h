// The forward-backward pass over the micro-batches of one step, as Megatron's
// get_forward_backward_func: no pipelining (gradient accumulation over micro-batches) here;
// pipeline schedules (1F1B, interleaved) live beside it and share this interface.
#pragma once
#include <functional>

#include "tessera/core/buffer.h"
#include "tessera/models/stage_model.h"
#include "tessera/pipeline/schedule_step.h"
#include "tessera/runtime/parallel_context.h"

namespace tessera::parallel {

struct PipelineState;  // pipeline_executor.h

struct ForwardBackwardArgs {
  models::StageModel* model = nullptr;
  ParallelContext* context = nullptr;
  int64_t num_micro_batches = 1;
  int64_t micro_batch_size = 1;
  int64_t seq_length = 1;
  // Micro-batch m of the step (models::MicroBatch: [micro_batch_size, seq_length] host tensors),
  // valid until the next call.
  std::function<models::MicroBatch(int64_t m)> load_micro_batch;
  // The dropout context of micro-batch m (training = false for evaluation).
  std::function<nn::DropoutContext(int64_t m)> dropout;
  bool forward_only = false;
  // The head chunk's forward of micro-batch m returned these logits (this TP rank's vocabulary
  // columns, [s*b, padded_vocab / tp]); valid during the call only (eval-only logits output).
  std::function<void(int64_t m, const Tensor& logits)> on_logits;
  // Each micro-batch's loss sum gradient is scaled by this: 1 / the step's denominator (summed over
  // micro-batches and data-parallel ranks), times the data-parallel size (the DP gradient
  // reduction averages) and the fp16 loss scale.
  double grad_scale = 1.0;
  // Pipeline schedules: called after each step a stage executes (forward, backward, a batch of
  // sends/receives); tests record the order with it.
  std::function<void(const ScheduleStep&)> on_step;
  // No-pipelining schedule: during the last micro-batch's backward, called with each layer's
  // parameter range once its gradients are final (the DP gradient reduction starts there).
  std::function<void(int begin, int end)> grads_final;
  // Pipeline schedules: the activation arenas and verified schedule shapes kept across steps (the
  // run owns them); null: a fresh state for this call only.
  PipelineState* pipeline_state = nullptr;
};

struct ForwardBackwardResult {
  // Sums over micro-batches of the loss terms (stage_model.h LossSum); last stage only.
  models::LossSum loss;
  int64_t micro_batches = 0;     // micro-batches whose loss this rank computed
  // Pipeline schedules: the most micro-batches whose activations this stage held at once (forward
  // run, backward not yet), and the most bytes of the per-micro-batch activation arenas in use.
  int64_t peak_in_flight_micro_batches = 0;
  size_t peak_activation_bytes = 0;
  size_t activation_arenas = 0;  // arenas in the pool after the step (= most slots live at once)
};

ForwardBackwardResult forward_backward_no_pipelining(const ForwardBackwardArgs& args, Arena& arena);

// Picks the schedule for the layout (no pipelining when pp = 1).
ForwardBackwardResult forward_backward(const ForwardBackwardArgs& args, Arena& arena);

}  // namespace tessera::parallel
