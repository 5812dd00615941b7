// ParallelContext: this rank's place in the parallel layout (the ProcessGrid) and the
// communicators of its groups, built once by tessera-train from the [parallel] config.
#pragma once
#include <memory>

#include "tessera/runtime/group_communicators.h"
#include "tessera/runtime/process_grid.h"
#include "tessera/runtime/parallel_config.h"

namespace tessera::parallel {

class ParallelContext {
 public:
  // Collective over MPI_COMM_WORLD. CPU devices use the MPI backend, CUDA devices NCCL.
  ParallelContext(const ParallelConfig& config, int world_size, int rank, Device device);
  ~ParallelContext();

  const ProcessGrid& grid() const { return *grid_; }
  Communicator& group(GroupKind kind) { return comms_->get(kind); }
  Communicator& tensor() { return group(GroupKind::tensor); }
  Communicator& data() { return group(GroupKind::data); }
  Communicator& pipeline() { return group(GroupKind::pipeline); }
  Communicator& embedding() { return group(GroupKind::embedding); }
  Communicator& model() { return group(GroupKind::model); }
  Communicator& world() { return group(GroupKind::world); }

  int tp_size() const { return grid_->tensor_size(); }
  int tp_rank() const { return grid_->tensor_rank(); }
  int pp_size() const { return grid_->pipeline_size(); }
  int pp_rank() const { return grid_->pipeline_rank(); }
  int dp_size() const { return grid_->data_size(); }
  int dp_rank() const { return grid_->data_rank(); }
  bool sequence_parallel() const { return sequence_parallel_; }
  Device device() const { return device_; }

 private:
  std::unique_ptr<ProcessGrid> grid_;
  std::unique_ptr<GroupCommunicators> comms_;
  bool sequence_parallel_ = false;
  Device device_;
};

}  // namespace tessera::parallel
