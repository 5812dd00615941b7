// MpiCommunicator: a Communicator over an MPI communicator of the group's ranks, on host tensors.
// Operations use MPI's non-blocking calls and wait with an optional timeout (CommOptions).
#pragma once
#include <mpi.h>

#include "tessera/runtime/communicator.h"

namespace tessera {

// Splits `parent` into the groups listed (as ranks of `parent`): every rank of parent must call it;
// returns MPI_COMM_NULL on a rank that is in none of the groups. Ranks keep the listed order.
MPI_Comm split_into_groups(MPI_Comm parent, const std::vector<std::vector<int>>& groups);

class MpiCommunicator : public Communicator {
 public:
  // Takes a duplicate of `comm` (the caller keeps its own); world_ranks lists its members in order.
  MpiCommunicator(MPI_Comm comm, std::vector<int> world_ranks, std::string name, CommOptions options = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  CommBackend backend() const override { return CommBackend::mpi; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  int rank() const override { return rank_; }
  MPI_Comm mpi_comm() const { return comm_; }

  void all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) override;
  using Communicator::all_reduce;
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  void reduce_scatter_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts,
                        ReduceOp op) override;
  void all_gather(const Tensor& input, const Tensor& output) override;
  void all_gather_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts) override;
  void broadcast(const Tensor& inout, int root) override;
  void send(const Tensor& tensor, int peer) override;
  void recv(const Tensor& tensor, int peer) override;
  void batched_p2p(const std::vector<P2POp>& ops) override;
  void all_to_all(const Tensor& input, const Tensor& output) override;
  void all_to_all_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& recv_counts) override;
  void barrier() override;
  void synchronize() override {}

 private:
  void wait(std::vector<MPI_Request>& requests, const char* op);
  void check_peer(int peer, const char* op) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<int> world_ranks_;
  std::string name_;
  CommOptions options_;
  int rank_ = 0;
};

}  // namespace tessera
