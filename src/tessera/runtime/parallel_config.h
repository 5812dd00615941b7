// The [parallel] section of a run's configuration: the layout ProcessGrid and ParallelContext are
// built from, and what the pipeline, tensor-parallel and data-parallel layers read of it.
#pragma once
#include <cstdint>
#include <string>

namespace tessera {

struct ParallelConfig {
  int64_t tensor_model_parallel_size, pipeline_model_parallel_size, num_layers_per_virtual_pipeline_stage;
  std::string pipeline_layer_split;  // "" or comma-separated layers per stage
  bool sequence_parallel;
  int64_t expert_model_parallel_size;
  bool use_distributed_optimizer;
  std::string recompute_granularity, recompute_method;
  int64_t recompute_num_layers;
  double distributed_timeout_minutes = 10;  // CommOptions::timeout_seconds / 60 (0: wait forever)
};

}  // namespace tessera
