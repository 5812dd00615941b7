// The model registry: one row per model family, keyed by model.architecture. A family builds its
// StageModel for this rank's chunks and checks that its config splits over the parallel layout.
// Adding a family: a model file (+ its HF name map and dataset) and one row in model_registry.cpp;
// the trainer, schedules, optimizer and checkpoint code see only StageModel and parameter roles.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/models/stage_model.h"
#include "tessera/nn/recompute.h"
#include "tessera/models/transformer_config.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::models {

struct ModelBuildArgs {
  const TransformerConfig* config = nullptr;
  int64_t vocab_size = 0;  // before padding
  DType dtype = DType::f32;
  Device device;
  std::vector<ChunkLayout> chunks{ChunkLayout{}};  // this rank's chunks (pipeline_chunk_layouts)
  parallel::TensorParallel tp;
  nn::ExpertParallel ep;  // the expert_model group (mixture of experts)
  int pipeline_size = 1;
  nn::RecomputeConfig recompute;  // activation recomputation of the transformer layers
};

struct ModelFamily {
  std::string architecture;  // model.architecture
  std::function<std::unique_ptr<StageModel>(const ModelBuildArgs&)> build;
};

// The family of `architecture`; ConfigError naming model.architecture and the registered ones.
const ModelFamily& model_family(const std::string& architecture);
std::vector<std::string> registered_architectures();

// Checks (ConfigError naming the keys) that a transformer splits over tensor parallelism: heads,
// query groups and ffn_hidden_size divisible by TP; with sequence parallelism, seq_length
// divisible by TP (any pipeline size: stages exchange the sequence-parallel shards).
void check_tensor_parallel_split(const TransformerConfig& config, const parallel::TensorParallel& tp,
                                 int pipeline_size);

// Model FLOPs per token of a causal LM (the convention printed beside throughput): 6 N + 12 L h s,
// N the parameters counted once (no position embeddings, a tied output layer once).
double flops_per_token(const TransformerConfig& config, int64_t counted_parameters);
// Mixture of experts: the expert parameters one token computes with, over all MoE layers
// (moe_router_topk experts' FFNs per MoE layer; the router and shared expert are dense parameters).
int64_t moe_active_expert_parameters(const TransformerConfig& config);

}  // namespace tessera::models
