#include "tessera/train/training_optimizer.h"

#include <algorithm>

namespace tessera::train {

std::unique_ptr<optim::DistributedOptimizer> make_training_optimizer(const Config& config, nn::ParameterStore& store,
                                                                     parallel::ParallelContext& context) {
  const bool mixed = config.training.precision != "fp32";
  const bool distributed = config.parallel.use_distributed_optimizer;
  if (!mixed && !distributed && context.dp_size() == 1 && context.tp_size() == 1 && context.pp_size() == 1)
    return nullptr;
  optim::DistributedOptimizerOptions options;
  options.shard_over_data_parallel = distributed;
  options.dynamic_loss_scaling = config.training.precision == "fp16";
  // On GPUs the buckets are reduced while the backward still runs: Megatron's default bucket size.
  if (store.device().is_cuda() && context.dp_size() > 1)
    options.bucket_size = std::max<int64_t>(40'000'000, int64_t{1'000'000} * context.dp_size());
  // The tied embedding is reduced over the embedding group too: bucket it alone when pp > 1.
  if (context.pp_size() > 1)
    for (int index : store.tied_embeddings()) options.own_bucket.push_back(store.parameters()[static_cast<size_t>(index)].name);
  std::vector<bool> weight_decay;
  for (const auto& p : store.parameters()) weight_decay.push_back(p.weight_decay);  // set at registration
  return std::make_unique<optim::DistributedOptimizer>(
      store, context, options, std::move(weight_decay),
      optim::grad_norm_counted_params(store, context.tp_size(), context.tp_rank()));
}

}  // namespace tessera::train
