// Failure-handling probe (label mpi): rank 1 alone gets bad input (tensor_model_parallel_size 3
// on its command line) and throws ConfigError while every other rank waits in a barrier.
// run_main must print rank 1's message once and end the whole job through MPI_Abort.
#include <string>

#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/mpi_communicator.h"
#include "tessera/runtime/process_grid.h"
#include "tessera/runtime/runtime.h"

using namespace tessera;

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    Runtime& rt = Runtime::get();
    int bad_tp = argc > 1 ? std::stoi(argv[1]) : 3;
    int failing_rank = rt.world_size() > 1 ? 1 : 0;
    ParallelSizes sizes;
    if (rt.world_rank() == failing_rank) sizes.tensor_model_parallel_size = bad_tp;  // throws ConfigError
    ProcessGrid grid(rt.world_size(), rt.world_rank(), sizes);
    std::vector<int> ranks(rt.world_size());
    for (int i = 0; i < rt.world_size(); ++i) ranks[i] = i;
    MpiCommunicator world(MPI_COMM_WORLD, ranks, "world");
    world.barrier();  // the healthy ranks block here until MPI_Abort ends them
    return 0;
  });
}
