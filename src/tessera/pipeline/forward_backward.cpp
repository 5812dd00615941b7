#include "tessera/pipeline/forward_backward.h"

#include "tessera/pipeline/pipeline_executor.h"

namespace tessera::parallel {

ForwardBackwardResult forward_backward_no_pipelining(const ForwardBackwardArgs& args, Arena& arena) {
  auto& model = *args.model;
  TESSERA_CHECK(model.num_chunks() == 1, "no-pipelining schedule with ", model.num_chunks(), " model chunks");
  ForwardBackwardResult result;
  Buffer tokens_buffer(static_cast<size_t>(args.micro_batch_size * (args.seq_length + 1)) * sizeof(int32_t));
  Buffer mask_buffer(static_cast<size_t>(args.micro_batch_size * args.seq_length) * sizeof(float));
  Tensor tokens = tokens_buffer.as_tensor(DType::i32, {args.micro_batch_size, args.seq_length + 1});
  Tensor mask = mask_buffer.as_tensor(DType::f32, {args.micro_batch_size, args.seq_length});
  for (int64_t m = 0; m < args.num_micro_batches; ++m) {
    args.load_micro_batch(m, tokens, mask);
    nn::DropoutContext dropout = args.dropout(m);
    std::unique_ptr<models::MicroBatchInputs> in = model.prepare_micro_batch(arena, tokens, mask);
    std::unique_ptr<models::ChunkActivations> acts = model.make_activations();
    model.forward_stage(0, arena, *in, {}, dropout, *acts);
    models::LossSum loss = model.stage_loss(arena, *in, *acts);
    if (!args.forward_only)
      model.backward_stage(0, arena, *in, {}, args.grad_scale, loss.token_count, dropout, *acts,
                           m + 1 == args.num_micro_batches ? args.grads_final : std::function<void(int, int)>());
    arena.reset();
    result.loss_mean_sum += loss.token_count > 0 ? loss.loss_sum / loss.token_count : 0.0;
    result.loss_sum += loss.loss_sum;
    result.token_count += loss.token_count;
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
