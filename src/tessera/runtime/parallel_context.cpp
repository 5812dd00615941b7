#include "tessera/runtime/parallel_context.h"

namespace tessera::parallel {

ParallelContext::ParallelContext(const ParallelConfig& config, int world_size, int rank, Device device)
    : sequence_parallel_(config.sequence_parallel), device_(device) {
  ParallelSizes sizes;
  sizes.tensor_model_parallel_size = static_cast<int>(config.tensor_model_parallel_size);
  sizes.pipeline_model_parallel_size = static_cast<int>(config.pipeline_model_parallel_size);
  sizes.expert_model_parallel_size = static_cast<int>(config.expert_model_parallel_size);
  grid_ = std::make_unique<ProcessGrid>(world_size, rank, sizes);
  // NCCL operations are ordered against the compute stream by events: training need not wait for each.
  CommOptions options;
  options.blocking = device.is_cpu();
  options.timeout_seconds = config.distributed_timeout_minutes * 60.0;
  comms_ = std::make_unique<GroupCommunicators>(*grid_, device.is_cpu() ? CommBackend::mpi : CommBackend::nccl, device,
                                                options);
}

ParallelContext::~ParallelContext() = default;

}  // namespace tessera::parallel
