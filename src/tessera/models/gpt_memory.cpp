// GPTModel::activation_memory: the arena bytes of a GPT chunk's forward, allocation by allocation
// (as forward_chunk, nn::TransformerLayer, SelfAttention, MLP and the TP mappings allocate them),
// under the run's tensor / sequence parallelism and recomputation. test/unit/models/recompute_test
// checks it against the measured arena on the CPU.
#include <algorithm>

#include "tessera/models/gpt.h"

namespace tessera::models {

namespace {
constexpr int64_t kAlignment = 256;  // core/buffer.cpp's arena alignment
int64_t aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
}  // namespace

ActivationMemory GPTModel::activation_memory(int64_t seq, int64_t batch) const {
  const auto& c = config_;
  const bool cuda = store_.device().is_cuda();
  const int64_t d = static_cast<int64_t>(dtype_size(store_.dtype()));
  const int64_t stat = cuda ? 4 : d;  // LayerNorm mean / rstd: f32 on a GPU
  const int64_t t = tp_.size, R = seq * batch, Rl = tp_.local_rows(R), h = c.hidden_size;
  const int64_t heads = c.num_attention_heads / t, groups = c.num_query_groups / t, hd = h / c.num_attention_heads;
  const int64_t ffn = c.ffn_hidden_size / t;
  const bool half = store_.dtype() == DType::bf16 || store_.dtype() == DType::f16;
  const bool flash = cuda && half && (hd == 64 || hd == 128);  // ops::flash_attention_supported (dropout too)
  auto gathered = [&] { return tp_.sequence_parallel ? aligned(R * h * d) : 0; };  // SP all-gather of a GEMM input
  const int64_t layernorm = aligned(Rl * h * d) + 2 * aligned(Rl * stat);
  const int64_t probs = flash ? aligned(batch * heads * seq * 4) : aligned(batch * heads * seq * seq * d);
  const int64_t gelu_out = aligned(R * ffn * d);
  ActivationMemory m;
  m.exact = c.num_experts == 0;
  // The output projections' results (and a row-parallel linear's partial sums) die at the residual
  // add: they live in LayerStack's scratch arena (nn/forward_scratch.h), not here.
  m.per_layer_none = layernorm + gathered() + aligned(R * (heads + 2 * groups) * hd * d) + aligned(R * heads * hd * d) +
                     probs + aligned(Rl * h * d) +                                     // attention, residual
                     layernorm + gathered() + aligned(R * ffn * d) + gelu_out + aligned(Rl * h * d);  // MLP, residual
  m.per_layer_selective = m.per_layer_none - gelu_out - (flash ? 0 : probs);
  m.per_layer_full = aligned(Rl * h * d);
  const nn::RecomputeConfig& rc = layer_stack_->config();
  const int64_t vocab_local = padded_vocab_ / t, loss = static_cast<int64_t>(dtype_size(loss_dtype()));
  int64_t largest_run = 0;
  for (const auto& chunk : chunks_) {
    const int64_t n = chunk.layout.num_layers;
    m.layers += n;
    m.kept_per_micro_batch_none += n * m.per_layer_none;
    for (const auto& run : nn::recompute_runs(rc, n)) {
      const int64_t len = run.end - run.begin;
      if (run.recomputed) {
        m.kept_per_micro_batch += aligned(Rl * h * d);
        largest_run = std::max(largest_run, len);
      } else {
        m.kept_per_micro_batch +=
            len * (rc.granularity == nn::RecomputeGranularity::selective ? m.per_layer_selective : m.per_layer_none);
      }
    }
    if (chunk.layout.has_embedding)  // words (and their TP reduction), positions
      m.embedding_and_head += aligned(R * h * d) + (t > 1 ? aligned(Rl * h * d) : 0) + aligned(Rl * h * d);
    if (chunk.layout.has_head)  // final LayerNorm, gathered hidden (SP), losses, the loss's dlosses, scaled
      // dlosses, the output layer's input gradient (the logits live chunk by chunk in the workspace)
      m.embedding_and_head += layernorm + gathered() + 3 * aligned(R * loss) + aligned(R * h * d);
  }
  m.kept_per_micro_batch += m.embedding_and_head;
  m.kept_per_micro_batch_none += m.embedding_and_head;
  // prepare(): ids, positions, labels, the loss mask in f32 (and in the loss dtype if another), and
  // document ids when the batch has them (counted always: a bound)
  m.inputs = 5 * aligned(R * 4) + (loss != 4 ? aligned(R * loss) : 0);
  // Transient, in LayerStack's scratch arenas (nn/recompute.h): one layer's backward (about as many
  // bytes as its forward's) at a time, or a recomputed run's forward again and its backward.
  // The output layer's logits chunk and its log-sum-exp (chunk_loss) share the backward's arena.
  const int64_t head_rows = output_chunk_rows(R, m.per_layer_none);
  m.workspace = std::max(m.per_layer_none, aligned(head_rows * vocab_local * d) + aligned(head_rows * loss));
  if (rc.granularity == nn::RecomputeGranularity::full) m.workspace = std::max(m.workspace, 2 * largest_run * m.per_layer_none);
  if (rc.granularity == nn::RecomputeGranularity::selective) m.workspace = std::max(m.workspace, 2 * m.per_layer_none);
  return m;
}

}  // namespace tessera::models
