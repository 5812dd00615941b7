// Collective correctness checks shared by the MPI test (host tensors, label mpi) and the NCCL test
// (device tensors, label gpu): every operation, every dtype, in place and out of place.
#pragma once
#include <string>

#include "tessera/runtime/communicator.h"

namespace tessera::testing {

// Runs every check on `comm` with tensors on `device` (CPU for MPI, the rank's GPU for NCCL);
// prints each failure and returns the number of failed checks on this rank.
int run_collective_checks(Communicator& comm, Device device);

}  // namespace tessera::testing
