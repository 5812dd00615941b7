// The mixture-of-experts figures of a training step (models::MoeStepStats reduced over the pipeline
// and data-parallel groups): moe_aux_loss and moe_z_loss (each MoE layer's loss without its
// coefficient, micro-batch-weighted like the lm loss, averaged over the MoE layers) for the log line
// and metrics_file, and each MoE layer's expert load (the share of routed slots per expert) and
// dropped slots for metrics_file.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/models/stage_model.h"
#include "tessera/models/transformer_config.h"
#include "tessera/runtime/parallel_context.h"

namespace tessera::train {

struct MoeLayerLoad {
  int64_t layer = 0;
  std::vector<double> expert_share;  // [E], sums to 1
  double dropped = 0;                // slots dropped over capacity in the step
};

struct MoeStepMetrics {
  std::vector<std::pair<std::string, double>> losses;  // moe_aux_loss, moe_z_loss
  std::vector<MoeLayerLoad> load;
};

// Every rank calls it (collectives over the pipeline and data groups); denominator: the step's,
// summed over DP.
MoeStepMetrics reduce_moe_stats(const models::MoeStepStats& stats, const models::TransformerConfig& model,
                                parallel::ParallelContext& context, double denominator);

}  // namespace tessera::train
