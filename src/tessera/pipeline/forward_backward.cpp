#include "tessera/pipeline/forward_backward.h"

#include "tessera/pipeline/pipeline_executor.h"

namespace tessera::parallel {

ForwardBackwardResult forward_backward_no_pipelining(const ForwardBackwardArgs& args, Arena& arena) {
  auto& model = *args.model;
  TESSERA_CHECK(model.num_chunks() == 1, "no-pipelining schedule with ", model.num_chunks(), " model chunks");
  ForwardBackwardResult result;
  for (int64_t m = 0; m < args.num_micro_batches; ++m) {
    nn::DropoutContext dropout = args.dropout(m);
    std::unique_ptr<models::MicroBatchInputs> in = model.prepare_micro_batch(arena, args.load_micro_batch(m));
    std::unique_ptr<models::ChunkActivations> acts = model.make_activations();
    models::StageTensors head = model.forward_stage(0, arena, *in, {}, dropout, *acts);
    if (args.on_logits) args.on_logits(m, model.stage_logits(arena, *in, *acts, head));
    models::LossSum loss =
        model.stage_loss(arena, *in, *acts, args.forward_only ? std::nullopt : std::optional<double>(args.grad_scale));
    if (!args.forward_only)
      model.backward_stage(0, arena, *in, {}, args.grad_scale, dropout, *acts,
                           m + 1 == args.num_micro_batches ? args.grads_final : std::function<void(int, int)>());
    arena.reset();
    models::accumulate(result.loss, loss);
    ++result.micro_batches;
  }
  return result;
}

ForwardBackwardResult forward_backward(const ForwardBackwardArgs& args, Arena& arena) {
  if (args.context == nullptr || args.context->pp_size() == 1) return forward_backward_no_pipelining(args, arena);
  // 1F1B (one chunk per stage) or interleaved 1F1B (several); the activation arenas persist
  // across the steps of the state's owner, one per (micro-batch, chunk) slot that was live at once.
  if (args.pipeline_state) return forward_backward_pipelining(args, *args.pipeline_state);
  PipelineState state;
  return forward_backward_pipelining(args, state);
}

}  // namespace tessera::parallel
