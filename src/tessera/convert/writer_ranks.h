// The ranks that write one converted checkpoint together (tessera-convert import-hf / reshard under
// srun or mpirun): file k of the target layout (the model shard files, then the distributed-optimizer
// files, in CheckpointWriter's order) is written by rank k % size, which reads only the tensors its
// files hold. Rank 0 creates the temporary folder and, once every rank has closed and synced its
// files, writes common.h5 and makes the checkpoint visible. One rank (the default) writes them all.
#pragma once
#include <cstddef>
#include <string>

namespace tessera::convert {

struct WriterRanks {
  int rank = 0, size = 1;
  // Every rank of MPI_COMM_WORLD (one rank when MPI is not initialised).
  static WriterRanks world();
  bool owns(size_t file_index) const { return static_cast<int>(file_index % static_cast<size_t>(size)) == rank; }
  bool leader() const { return rank == 0; }
  // Rank 0's value on every rank.
  std::string from_leader(const std::string& value) const;
  void barrier() const;
};

}  // namespace tessera::convert
