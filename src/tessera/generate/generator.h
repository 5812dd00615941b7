// The generation engine: runs a GenerationRequest on every rank of a TP x PP layout (DP = 1).
// World rank 0 owns the request: it broadcasts it, receives the last stage's logits each step
// (gathered over TP), decides the next tokens (greedy, seeded sampling or beam search) and
// broadcasts them, so every rank feeds the same tokens. Prompts of different lengths are left
// padded: the padding is masked out of attention and positions count from each prompt's first
// token. Each rank's KV cache is allocated once per request in a cache arena and every step's
// activations come from a step arena that is reset (its blocks reused) each step: no per-token
// allocation once the first steps have sized the arenas.
#pragma once
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/generate/request.h"
#include "tessera/generate/step_graph.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/parallel_context.h"

namespace tessera::generate {

class Generator {
 public:
  // ConfigError for a layout generation does not run: DP > 1, sequence parallelism, virtual
  // pipeline stages, activation recomputation.
  // cuda_graphs: on one GPU (TP = PP = 1), replay greedy decode steps as a captured CUDA graph.
  Generator(models::GPTModel& model, parallel::ParallelContext& context, const ParallelConfig& parallel,
            int64_t pad_token, bool cuda_graphs = true);

  // World rank 0: runs `request` (validated by the caller) on every rank; the results, in prompt
  // order. The other ranks must be in follow().
  std::vector<GenerationResult> run(const GenerationRequest& request);
  // The other ranks: waits for rank 0's next request and runs it; false once rank 0 stops.
  bool follow();
  void stop_followers();  // rank 0: ends every follow()

  int64_t max_length() const;  // positions the model has

 private:
  std::vector<GenerationResult> execute(const GenerationRequest& request);
  std::vector<GenerationResult> sample_batch(const GenerationRequest& request);
  GenerationResult beam_search(const GenerationRequest& request, const std::vector<int32_t>& prompt);
  // One forward of t new tokens per row at cache indices [past, past + t) through every stage.
  // ids / positions: host [t][rows] (sequence-major). On world rank 0: the
  // logits, rows x vocab (last token of each row) or t * rows x vocab (all, sequence-major).
  // greedy_only (with last_only): instead of the logits, (argmax, its log-probability) per row,
  // reduced where the logits are (ops/argmax.h), as rows x 2 floats.
  std::vector<float> forward(const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                             const std::vector<uint8_t>& key_mask, int64_t past, int64_t tokens, bool last_only,
                             bool greedy_only = false);
  // A request's KV cache and step-input buffer (cache arena), the graph forgotten.
  void allocate_request(int64_t rows, int64_t capacity);
  // The step's ids, positions (n = t * rows each), key mask and cached-token count into the request's
  // input buffer without a stream synchronisation (one staged copy each); returns the key mask and
  // sets the ids / positions views (fixed addresses: a captured decode step reads them in place).
  Tensor upload_inputs(const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                       const std::vector<uint8_t>& key_mask, int64_t past, int64_t n, Tensor& ids_t,
                       Tensor& positions_t);
  // Rank 0's choice broadcast to every rank (values[0] = 1 when generation ends after this step).
  void broadcast_ints(std::vector<int32_t>& values);

  models::GPTModel& model_;
  parallel::ParallelContext& context_;
  int64_t pad_token_;
  Arena cache_arena_, step_arena_;
  models::GPTKvCache cache_;
  bool cuda_graphs_;
  bool graph_failed_ = false;
  StepGraph graph_;
  Tensor graph_summary_;  // the captured step's output: argmax indices, then f32 log-probabilities
  Tensor inputs_device_;  // i32 [1 + mask words + 2 capacity rows]: past, key mask, ids, positions
  std::vector<int32_t> inputs_host_;  // its host staging copy
};

}  // namespace tessera::generate
