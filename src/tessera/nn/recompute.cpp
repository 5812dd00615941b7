#include "tessera/nn/recompute.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"

namespace tessera::nn {

const char* name(RecomputeGranularity granularity) {
  switch (granularity) {
    case RecomputeGranularity::none: return "none";
    case RecomputeGranularity::selective: return "selective";
    case RecomputeGranularity::full: return "full";
  }
  return "?";
}

const char* name(RecomputeMethod method) { return method == RecomputeMethod::uniform ? "uniform" : "block"; }

RecomputeConfig parse_recompute_config(const std::string& granularity, const std::string& method,
                                       int64_t num_layers) {
  RecomputeConfig config;
  if (granularity == "none") config.granularity = RecomputeGranularity::none;
  else if (granularity == "selective") config.granularity = RecomputeGranularity::selective;
  else if (granularity == "full") config.granularity = RecomputeGranularity::full;
  else
    TESSERA_CONFIG_FAIL("parallel.recompute_granularity = \"", granularity,
                        "\" is not allowed; allowed: \"none\", \"selective\", \"full\"");
  if (method == "uniform") config.method = RecomputeMethod::uniform;
  else if (method == "block") config.method = RecomputeMethod::block;
  else
    TESSERA_CONFIG_FAIL("parallel.recompute_method = \"", method, "\" is not allowed; allowed: \"uniform\", \"block\"");
  if (num_layers < 1)
    TESSERA_CONFIG_FAIL("parallel.recompute_num_layers = ", num_layers, " must be at least 1");
  config.num_layers = num_layers;
  return config;
}

void check_recompute_layers(const RecomputeConfig& config, int64_t chunk_layers, const std::string& where) {
  if (config.granularity != RecomputeGranularity::full || config.num_layers <= chunk_layers) return;
  TESSERA_CONFIG_FAIL("parallel.recompute_num_layers = ", config.num_layers, " is larger than the ", chunk_layers,
                      " layers of ", where, " (parallel.recompute_granularity = \"full\", parallel.recompute_method = \"",
                      name(config.method), "\" count layers per pipeline stage, or per model chunk with ",
                      "parallel.num_layers_per_virtual_pipeline_stage); use at most ", chunk_layers);
}

std::vector<LayerRun> recompute_runs(const RecomputeConfig& config, int64_t layers) {
  std::vector<LayerRun> runs;
  if (layers == 0) return runs;
  if (config.granularity != RecomputeGranularity::full) return {{0, layers, false}};
  TESSERA_CHECK(config.num_layers >= 1 && config.num_layers <= layers, "recompute_num_layers ", config.num_layers,
                " for a chunk of ", layers, " layers");
  if (config.method == RecomputeMethod::uniform) {
    for (int64_t b = 0; b < layers; b += config.num_layers) runs.push_back({b, std::min(layers, b + config.num_layers), true});
  } else {
    for (int64_t b = 0; b < config.num_layers; ++b) runs.push_back({b, b + 1, true});
    if (config.num_layers < layers) runs.push_back({config.num_layers, layers, false});
  }
  return runs;
}

namespace {
// Scratch arena blocks: large on a GPU (few device allocations), small on the CPU (zero-filled).
size_t scratch_block_bytes(Device device) { return device.is_cuda() ? size_t(64) << 20 : size_t(1) << 20; }
}  // namespace

LayerStack::LayerStack(const RecomputeConfig& config, Device device)
    : config_(config),
      work_(scratch_block_bytes(device), device),
      backward_(scratch_block_bytes(device), device),
      carry_{Arena(size_t(1) << 20, device), Arena(size_t(1) << 20, device)} {}

size_t LayerStack::scratch_peak_bytes() const {
  return work_.peak_bytes() + backward_.peak_bytes() + carry_[0].peak_bytes() + carry_[1].peak_bytes();
}

namespace {
Tensor copy_into(Arena& arena, const Tensor& t) {
  Tensor out = arena.allocate(t.dtype(), t.shape());
  ops::copy(t, out);
  return out;
}
}  // namespace

Tensor LayerStack::carry(const Tensor& dx) const {
  Arena& arena = carry_[static_cast<size_t>(next_carry_)];
  next_carry_ ^= 1;
  arena.reset();  // the other carry arena holds the gradient the run started from
  return copy_into(arena, dx);
}

Tensor LayerStack::forward(const std::vector<TransformerLayer>& layers, Arena& arena, Tensor x, int64_t seq,
                           int64_t batch, const Tensor& key_padding_mask, const DropoutContext& dropout,
                           LayerStackSaved& saved, const Tensor& positions, const Tensor& document_ids) const {
  const auto runs = recompute_runs(config_, static_cast<int64_t>(layers.size()));
  work_.consolidate();  // one block from the second chunk forward on (Arena::consolidate)
  saved.layers.assign(layers.size(), TransformerLayer::Saved{});
  saved.run_inputs.assign(runs.size(), Tensor());
  saved.key_padding_mask = key_padding_mask;
  saved.positions = positions;
  saved.document_ids = document_ids;
  const bool selective = config_.granularity == RecomputeGranularity::selective;
  for (size_t r = 0; r < runs.size(); ++r) {
    const LayerRun& run = runs[r];
    if (!run.recomputed) {
      for (int64_t i = run.begin; i < run.end; ++i) {
        work_.reset();  // what the layer's backward does not read lives here until its forward ends
        x = layers[static_cast<size_t>(i)].forward(arena, x, seq, batch, key_padding_mask, dropout,
                                                   saved.layers[static_cast<size_t>(i)], positions, document_ids,
                                                   ForwardScratch{&work_, selective});
      }
      continue;
    }
    saved.run_inputs[r] = x;
    work_.reset();
    TransformerLayer::Saved discarded;
    for (int64_t i = run.begin; i < run.end; ++i) {
      x = layers[static_cast<size_t>(i)].forward(work_, x, seq, batch, key_padding_mask, dropout, discarded, positions,
                                                 document_ids);
      // A MoE layer's router statistics (losses, loads) outlive its activations: the model logs them.
      saved.layers[static_cast<size_t>(i)].moe.keep_statistics_of(discarded.moe);
    }
    x = copy_into(arena, x);  // the next run's input (or the chunk's output) outlives the scratch
  }
  return x;
}

Tensor LayerStack::backward(const std::vector<TransformerLayer>& layers, Arena& arena, Tensor dout, int64_t seq,
                            int64_t batch, const DropoutContext& dropout, const LayerStackSaved& saved,
                            const std::function<void(size_t)>& layer_done, double aux_loss_scale) const {
  const auto runs = recompute_runs(config_, static_cast<int64_t>(layers.size()));
  TESSERA_CHECK(saved.layers.size() == layers.size() && saved.run_inputs.size() == runs.size(),
                "layer backward without the matching forward (", saved.layers.size(), " saved layers, ",
                layers.size(), " layers)");
  for (Arena* scratch : {&work_, &backward_, &carry_[0], &carry_[1]}) scratch->consolidate();  // dout is not in them
  bool in_scratch = false;  // dout lives in a carry arena
  for (size_t r = runs.size(); r-- > 0;) {
    const LayerRun& run = runs[r];
    if (!run.recomputed) {
      for (int64_t i = run.end; i-- > run.begin;) {
        backward_.reset();  // the previous layer's backward buffers: only its input gradient (carried) lives on
        dout = carry(layers[static_cast<size_t>(i)].backward(backward_, dout, seq, batch, dropout,
                                                             saved.layers[static_cast<size_t>(i)], aux_loss_scale));
        in_scratch = true;
        if (layer_done) layer_done(static_cast<size_t>(i));
      }
      continue;
    }
    // The run's forward again from its input, with the same dropout masks.
    work_.reset();
    std::vector<TransformerLayer::Saved> again(static_cast<size_t>(run.end - run.begin));
    Tensor x = saved.run_inputs[r];
    for (int64_t i = run.begin; i < run.end; ++i)
      x = layers[static_cast<size_t>(i)].forward(work_, x, seq, batch, saved.key_padding_mask, dropout,
                                                 again[static_cast<size_t>(i - run.begin)], saved.positions,
                                                 saved.document_ids);
    backward_.reset();
    for (int64_t i = run.end; i-- > run.begin;) {
      dout = layers[static_cast<size_t>(i)].backward(backward_, dout, seq, batch, dropout,
                                                     again[static_cast<size_t>(i - run.begin)], aux_loss_scale);
      if (layer_done) layer_done(static_cast<size_t>(i));
    }
    dout = carry(dout);
    in_scratch = true;
  }
  return in_scratch ? copy_into(arena, dout) : dout;
}

}  // namespace tessera::nn
