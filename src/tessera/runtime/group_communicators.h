// GroupCommunicators: one Communicator per group of a ProcessGrid (tensor, data, pipeline, expert
// ...), on the MPI or the NCCL backend; make_communicator builds one for an MPI communicator.
#pragma once
#include <mpi.h>

#include <memory>
#include <vector>

#include "tessera/runtime/communicator.h"
#include "tessera/runtime/process_grid.h"

namespace tessera {

// MPI: a host-memory MpiCommunicator. NCCL: a device-memory NcclCommunicator on `device` (a CUDA
// build is needed; otherwise Error). Collective over group_comm.
std::unique_ptr<Communicator> make_communicator(CommBackend backend, MPI_Comm group_comm, std::vector<int> world_ranks,
                                                std::string name, Device device, CommOptions options = {});

class GroupCommunicators {
 public:
  // Collective over MPI_COMM_WORLD: splits it once per group kind (cheap). Communicators themselves
  // are created on first use by get(), which is collective over that group's members only (for
  // NCCL: the unique id broadcast and ncclCommInitRank), so members must ask in the same order.
  GroupCommunicators(const ProcessGrid& grid, CommBackend backend, Device device, CommOptions options = {});
  ~GroupCommunicators();
  GroupCommunicators(const GroupCommunicators&) = delete;
  GroupCommunicators& operator=(const GroupCommunicators&) = delete;

  // Throws Error if this rank is not in a group of that kind (e.g. embedding on a middle stage).
  Communicator& get(GroupKind kind);
  const ProcessGrid& grid() const { return grid_; }
  CommBackend backend() const { return backend_; }

 private:
  const ProcessGrid& grid_;
  CommBackend backend_;
  Device device_;
  CommOptions options_;
  std::vector<MPI_Comm> mpi_comms_;                    // by GroupKind; MPI_COMM_NULL if not a member
  std::vector<std::unique_ptr<Communicator>> comms_;   // by GroupKind; created lazily
};

}  // namespace tessera
