// What a checkpoint holds, as plain structs independent of HDF5: self-describing model tensor shards,
// optimizer state as flat (parameter, offset, count) slices, training progress and the writer's layout.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ckpt {

// One model tensor as this rank holds it. split_axis = -1: the rank holds the whole tensor
// (global_shape = local shape, split_offset = 0); otherwise the local tensor is the slice
// [split_offset, split_offset + local.dim(split_axis)) of the global tensor along split_axis.
struct TensorShard {
  std::string name;  // Megatron key, e.g. "decoder.layers.3.self_attention.linear_qkv.weight"
  Tensor local;      // CPU tensor (f32, bf16, f16 or f64)
  Shape global_shape;
  int split_axis = -1;
  int64_t split_offset = 0;
  int vocab_axis = -1;  // >= 0: (padded) vocabulary rows on this axis, resized across paddings on load
};

// The optimizer state of elements [flat_offset, flat_offset + count) of one parameter's local shard
// (flattened, row-major). A non-distributed optimizer holds one slice per parameter (offset 0, count
// = local numel); the distributed optimizer holds, on each DP rank, the slice it owns.
struct OptimizerSlice {
  TensorShard param;        // the parameter as the rank holds it (its local tensor is not written here)
  int64_t flat_offset = 0;
  int64_t count = 0;
  Tensor exp_avg;           // f32 [count]
  Tensor exp_avg_sq;        // f32 [count]
  Tensor main_param;        // f32 [count]; undefined when the model parameters are themselves f32
};

struct OptimizerState {
  int64_t step = 0;             // optimizer steps taken (AdamW bias correction)
  double loss_scale = 1.0;      // fp16 dynamic loss scaler
  int64_t growth_tracker = 0;   // steps since the last scale change
  int64_t hysteresis = 0;       // remaining hysteresis of the scaler
  bool distributed = false;     // true: slices are this DP rank's share (ZeRO-1)
  std::vector<OptimizerSlice> slices;
};

// Where every random stream comes from: Tessera's generator is counter-based and stateless
// (Philox(seed, stream, index)), so the seed plus the iteration and consumed samples determine every
// rank's initialisation, data order and dropout masks.
struct TrainingProgress {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  int64_t eval_consumed_samples = 0;
  int64_t skipped_iterations = 0;
  int64_t nan_iterations = 0;
  int64_t seed = 0;
};

// The writer's place in the parallel layout.
struct ShardCoordinates {
  int tp_rank = 0, tp_size = 1;
  int pp_rank = 0, pp_size = 1;
  int ep_rank = 0, ep_size = 1;
  int dp_rank = 0, dp_size = 1;
  int world_rank = 0, world_size = 1;
};

// Everything saved besides tensors: the scheduler's settings, model facts, the resolved config.
struct CheckpointMetadata {
  std::map<std::string, double> scheduler;        // lr, min_lr, warmup_iters, ... (numbers)
  std::map<std::string, std::string> scheduler_names;  // lr_decay_style, ...
  std::map<std::string, int64_t> model;           // vocab_size, padded_vocab_size, num_layers, ...
  std::string config_toml;                        // Config::to_toml()
  std::string params_dtype = "f32";
};

}  // namespace tessera::ckpt
