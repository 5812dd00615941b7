// Start-of-run report of a model-parallel layout: Megatron's " > number of parameters on (tensor,
// pipeline) model parallel rank (t, p): N" line for every (tensor, pipeline) rank, printed by the
// output rank after gathering the counts (collective over the world).
#pragma once
#include "tessera/nn/parameter_store.h"
#include "tessera/runtime/parallel_context.h"

namespace tessera::parallel {

void log_parameters_per_model_parallel_rank(ParallelContext& ctx, const nn::ParameterStore& store);

}  // namespace tessera::parallel
