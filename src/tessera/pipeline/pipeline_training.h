// What the trainer does around the pipeline schedules: the output rank (last stage), tied
// word-embedding copies kept equal over the embedding group (initial broadcast, gradient
// all-reduce each step), values computed on the last stage handed to every stage, the
// parameter count over stages, and the per-stage activation-memory report.
#pragma once
#include <cstdint>

#include "tessera/models/stage_model.h"
#include "tessera/pipeline/forward_backward.h"
#include "tessera/runtime/parallel_context.h"

namespace tessera::parallel {

// pp > 1: the last stage (tp = dp = 0) becomes log's output rank; the interleaved schedule's
// micro-batch constraint is checked (ConfigError); every stage's schedule is verified; the last
// stage's copy of the tied embedding (ParameterRoles::tied_embedding) is set to the first stage's
// (broadcast over the embedding group, Megatron's shared embedding). Collective over the world.
// No-op when pp = 1.
void setup_pipeline_training(models::StageModel& model, ParallelContext& context, int64_t num_micro_batches);

// Sums the tied embedding's gradient of the first stage and of its copy on the last stage over
// the embedding group (Megatron finalize_model_grads). No-op when pp = 1.
void all_reduce_tied_embedding_grads(nn::ParameterStore& store, ParallelContext& context);

// The last stage's value on every stage of the pipeline group (exact: sent as its 64 bits).
double value_from_last_stage(ParallelContext& context, double value);
int64_t value_from_last_stage(ParallelContext& context, int64_t value);

// Parameters counted for FLOPs over the whole model: the global (unsplit over TP) sizes of this
// rank's parameters minus position embeddings and copies (ParameterRoles), summed over the
// pipeline group, so each parameter counts once whatever TP and PP are. MoE expert parameters
// (roles.reduce_group = expert_data) are left out: only a token's top-k experts compute
// (models::moe_active_expert_parameters adds those).
int64_t pipeline_flops_parameter_count(const nn::ParameterStore& store, ParallelContext& context);

// Gathers every stage's peak activation bytes and in-flight micro-batches of `measured` (a step
// run through forward_backward) and logs one line on the output rank. Collective over the pipeline group.
void log_pipeline_activation_memory(ParallelContext& context, const ForwardBackwardResult& measured,
                                    int64_t num_micro_batches);

}  // namespace tessera::parallel
