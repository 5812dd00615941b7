// The trainer's choice of optimizer from the run's config: the distributed / mixed-precision
// optimizer when the run needs it, and its options (buckets, the tied embedding's own bucket,
// weight decay from each parameter's registration).
#pragma once
#include <memory>

#include "tessera/optim/distributed_optimizer.h"
#include "tessera/train/config.h"

namespace tessera::train {

// The trainer's optimizer when the run needs it (data parallelism, the distributed optimizer,
// mixed precision, or a model-parallel layout whose grad norm spans ranks); nullptr when the plain
// single-rank fp32 AdamWOptimizer path applies. Call after the model is initialised.
std::unique_ptr<optim::DistributedOptimizer> make_training_optimizer(const Config& config, nn::ParameterStore& store,
                                                                     parallel::ParallelContext& context);

}  // namespace tessera::train
