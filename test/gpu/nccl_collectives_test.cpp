// The collective checks of test/mpi on GPUs through NCCL (label gpu): one rank per GPU, e.g.
//   mpirun -np 2 build/bin/gpu_nccl_collectives_test
// Exits 77 (skipped) on a build without CUDA or a machine without a visible GPU.
#include <cstdio>

#include "mpi/collective_checks.h"
#include "tessera/runtime/group_communicators.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/runtime.h"

namespace tessera {
int cuda_visible_device_count();
}

using namespace tessera;

int main(int argc, char** argv) {
  Runtime& rt = Runtime::init(&argc, &argv);
  if (cuda_visible_device_count() == 0) {
    if (rt.world_rank() == 0) std::printf("SKIP: no GPU visible (or a CPU-only build); NCCL test not run\n");
    rt.finalize();
    return 77;
  }
  return run_main(argc, argv, [](int, char**) {
    Runtime& rt = Runtime::get();
    Device device = rt.select_device("cuda");
    int failures = 0;
    // The world as one group (tp = world), then every group kind of that grid, created lazily.
    ProcessGrid grid(rt.world_size(), rt.world_rank(), {rt.world_size(), 1, 1, 0, 1});
    GroupCommunicators blocking(grid, CommBackend::nccl, device);
    failures += testing::run_collective_checks(blocking.get(GroupKind::tensor), device);
    failures += testing::run_collective_checks(blocking.get(GroupKind::data), device);
    CommOptions async;
    async.blocking = false;
    async.timeout_seconds = 60;
    GroupCommunicators nonblocking(grid, CommBackend::nccl, device, async);
    failures += testing::run_collective_checks(nonblocking.get(GroupKind::world), device);
    int total = 0;
    TESSERA_MPI_CHECK(MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rt.world_rank() == 0)
      std::printf("nccl collectives on %d GPUs: %s (%d failures)\n", rt.world_size(), total ? "FAILED" : "passed", total);
    return total == 0 ? 0 : 1;
  });
}
