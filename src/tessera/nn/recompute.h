// Activation recomputation (Megatron's recompute_granularity / recompute_method /
// recompute_num_layers) over the transformer layers of one model chunk.
//   full + uniform: the chunk's layers in runs of recompute_num_layers; a run keeps only its input
//     and runs its forward again inside its backward.
//   full + block: the first recompute_num_layers layers of the chunk, one run each, recomputed;
//     the other layers keep every activation.
//   selective: every layer keeps its activations except the core attention's s x s probabilities
//     (where the unfused attention stores them; flash attention never does) and the MLP's GeLU
//     output, which the layer's backward computes again from what it kept (docs/recompute.md).
// The forward run again inside backward draws the same dropout masks: a mask is a function of the
// run's seed, the micro-batch's pass key, the layer's site name and the element's global index, so
// gradients are bitwise those of the run without recomputation.
// Memory: a recomputed run's forward works in a scratch arena reset after it (only the run's
// output is copied to the caller's arena); a kept layer's forward puts what its backward does not
// read (nn/forward_scratch.h) in that arena too. Backward recomputes a run in that arena, runs its
// backward (a kept layer's: the layer's) in a second one and copies the input gradient into one of
// two small carry arenas used in turn, so a chunk's backward holds one run's (or one layer's)
// activations and gradients at a time, whatever the granularity.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/nn/transformer_layer.h"

namespace tessera::nn {

enum class RecomputeGranularity { none, selective, full };
enum class RecomputeMethod { uniform, block };

struct RecomputeConfig {
  RecomputeGranularity granularity = RecomputeGranularity::none;
  RecomputeMethod method = RecomputeMethod::uniform;
  int64_t num_layers = 1;  // full: layers per run (uniform) or recomputed layers per chunk (block)
};

// From the config values; ConfigError naming parallel.recompute_granularity / recompute_method /
// recompute_num_layers for an unknown value or recompute_num_layers < 1.
RecomputeConfig parse_recompute_config(const std::string& granularity, const std::string& method,
                                       int64_t num_layers);
const char* name(RecomputeGranularity granularity);
const char* name(RecomputeMethod method);

// Consecutive layers [begin, end) of a chunk; recomputed: only the run's input is kept.
struct LayerRun {
  int64_t begin = 0, end = 0;
  bool recomputed = false;
};
// The runs of a chunk of `layers` layers (full: recompute_num_layers must not exceed `layers`,
// checked by the caller with check_recompute_layers).
std::vector<LayerRun> recompute_runs(const RecomputeConfig& config, int64_t layers);
// ConfigError naming parallel.recompute_num_layers when a full recomputation asks for more layers
// than a chunk of `chunk_layers` layers holds (where: "pipeline stage 1 chunk 0").
void check_recompute_layers(const RecomputeConfig& config, int64_t chunk_layers, const std::string& where);

// What a chunk's layers keep from forward to backward.
struct LayerStackSaved {
  std::vector<TransformerLayer::Saved> layers;  // empty Saved for the layers of recomputed runs
  std::vector<Tensor> run_inputs;               // per run: its input (recomputed runs only)
  Tensor key_padding_mask, positions, document_ids;  // the forward's (recomputed runs use them again)
};

// Runs a chunk's layers forward and backward under a recomputation config, with its own scratch
// arenas on the model's device (one set per model: a chunk's forward or backward runs whole
// before the next starts).
class LayerStack {
 public:
  LayerStack(const RecomputeConfig& config, Device device);
  const RecomputeConfig& config() const { return config_; }
  Tensor forward(const std::vector<TransformerLayer>& layers, Arena& arena, Tensor x, int64_t seq, int64_t batch,
                 const Tensor& key_padding_mask, const DropoutContext& dropout, LayerStackSaved& saved,
                 const Tensor& positions = Tensor(), const Tensor& document_ids = Tensor()) const;
  // layer_done(i): layer i's parameter gradients are complete (backward order).
  Tensor backward(const std::vector<TransformerLayer>& layers, Arena& arena, Tensor dout, int64_t seq, int64_t batch,
                  const DropoutContext& dropout, const LayerStackSaved& saved,
                  const std::function<void(size_t)>& layer_done, double aux_loss_scale = 0.0) const;
  // The most bytes the scratch arenas held so far (together).
  size_t scratch_peak_bytes() const;
  // The backward scratch arena, idle between forward() and backward(): the model's head uses it for
  // its transient buffers (GPTModel::chunk_loss's logits chunk) and resets it when done.
  Arena& head_scratch() const { return backward_; }

 private:
  // dx (in backward_) copied into the carry arena not holding the gradient this run started from.
  Tensor carry(const Tensor& dx) const;
  RecomputeConfig config_;
  mutable Arena work_;      // a run's forward (in forward, or again in backward); selective: what layers drop
  mutable Arena backward_;  // a run's backward
  mutable std::array<Arena, 2> carry_;  // a run's input gradient, in turn
  mutable int next_carry_ = 0;
};

}  // namespace tessera::nn
