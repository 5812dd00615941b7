// tessera-bench comm: times one collective over a range of message sizes through a Tessera
// Communicator (MPI or NCCL) and prints time, algorithm bandwidth and bus bandwidth per size.
#pragma once
#include <cstdint>
#include <string>

namespace tessera::bench {

struct CommBenchOptions {
  std::string backend = "mpi";    // mpi | nccl
  std::string op = "all_reduce";  // all_reduce | all_gather | reduce_scatter | broadcast | all_to_all
  std::string dtype = "f32";
  int64_t min_bytes = 1024;
  int64_t max_bytes = int64_t(64) << 20;
  int step_factor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = true;              // verify every result element once per size
  bool blocking = true;           // NCCL: wait for each operation (false: enqueue all, wait at the end)
  bool raw_nccl = false;          // NCCL: also time ncclAllReduce/... directly on the same communicator
  double timeout_seconds = 0;
};

// Returns the process exit code (non-zero when a check failed).
int run_comm_bench(const CommBenchOptions& options);

}  // namespace tessera::bench
