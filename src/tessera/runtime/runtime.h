// Process-wide runtime: MPI initialisation and finalisation, world and node-local ranks (from
// MPI_Comm_split_type, so mpirun and srun both work) and the device this rank computes on.
#pragma once
#include <string>

#include "tessera/core/tensor.h"

namespace tessera {

class Runtime {
 public:
  // Initialises MPI (MPI_THREAD_FUNNELED) once; later calls return the same object.
  static Runtime& init(int* argc, char*** argv);
  static Runtime& get();  // after init()
  static bool initialized();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // "auto" (cuda if this build has it and a GPU is visible, else cpu) | "cpu" | "cuda".
  // A request for cuda with no GPU visible (or a CPU-only build) is a ConfigError.
  Device select_device(const std::string& request);

  void finalize();  // MPI_Finalize if we initialised MPI; idempotent
  [[noreturn]] void abort(int exit_code);  // MPI_Abort on every rank

 private:
  Runtime() = default;
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  bool finalized_ = false;
};

}  // namespace tessera
