#include "tessera/parallel/forward_backward.h"

#include "tessera/parallel/pipeline_executor.h"

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
    models::GPTInputs in = model.prepare(arena, tokens, mask);
    models::GPTChunkActivations acts;
    model.forward_chunk(0, arena, in, Tensor(), Tensor(), dropout, acts);
    models::LossSum loss = model.chunk_loss(arena, in, acts);
    if (!args.forward_only)
      model.backward_chunk(0, arena, in, Tensor(), args.grad_scale, loss.token_count, dropout, acts,
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
  // across steps, one per (micro-batch, chunk) slot that was live at once.
  static PipelineArenaPool pool;
  return forward_backward_pipelining(args, pool);
}

}  // namespace tessera::parallel
