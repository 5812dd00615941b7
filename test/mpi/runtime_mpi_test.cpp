// Multi-rank runtime test (run under mpirun, label mpi). Modes:
//   collectives  every collective on the world and on sub-groups, each dtype, in/out of place
//   grid         (8 ranks) communicators of every group equal Megatron's lists for several layouts
//   timeout      a collective only rank 0 enters turns into an Error naming the group and op
//   local_rank   Runtime::local_rank() (which picks the GPU) equals the launcher's node-local rank:
//                OMPI_COMM_WORLD_LOCAL_RANK (mpirun) or SLURM_LOCALID (srun), as set at exec time
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "collective_checks.h"
#include "megatron_layouts.h"
#include "tessera/core/error.h"
#include "tessera/runtime/group_communicators.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/mpi_communicator.h"
#include "tessera/runtime/runtime.h"

using namespace tessera;

namespace {

std::vector<int> grid_ranks(int n) {
  std::vector<int> r(n);
  for (int i = 0; i < n; ++i) r[i] = i;
  return r;
}

int collectives(Runtime& rt) {
  int failures = 0;
  MpiCommunicator world(MPI_COMM_WORLD, grid_ranks(rt.world_size()), "world");
  failures += testing::run_collective_checks(world, Device::cpu());
  // Sub-groups: the tensor and data groups of a tp2 layout (when the world allows it).
  if (rt.world_size() % 2 == 0 && rt.world_size() > 2) {
    ProcessGrid grid(rt.world_size(), rt.world_rank(), {2, 1, 1, 0, 1});
    GroupCommunicators groups(grid, CommBackend::mpi, Device::cpu());
    failures += testing::run_collective_checks(groups.get(GroupKind::tensor), Device::cpu());
    failures += testing::run_collective_checks(groups.get(GroupKind::data), Device::cpu());
  }
  return failures;
}

}  // namespace

int grid_mapping(Runtime& rt) {
  int failures = 0, layouts = 0;
  for (const auto& layout : testing::megatron_layouts()) {
    if (layout.world_size != rt.world_size()) continue;
    ++layouts;
    ProcessGrid grid(rt.world_size(), rt.world_rank(), layout.sizes);
    GroupCommunicators groups(grid, CommBackend::mpi, Device::cpu());
    for (const auto& [kind, expected] : layout.groups) {
      const std::vector<int>* mine = nullptr;
      for (const auto& g : expected)
        for (int r : g)
          if (r == rt.world_rank()) mine = &g;
      if (!mine) {
        if (grid.in_group(kind)) {
          std::fprintf(stderr, "FAIL %s %s: rank %d should be in no group\n", layout.name.c_str(),
                       group_kind_name(kind).c_str(), rt.world_rank());
          ++failures;
        }
        continue;
      }
      // Ask the group's communicator itself who its members are, in rank order.
      Communicator& comm = groups.get(kind);
      std::vector<int32_t> me = {rt.world_rank()}, members(comm.size());
      comm.all_gather(Tensor(me.data(), DType::i32, {1}), Tensor(members.data(), DType::i32, {comm.size()}));
      std::vector<int> got(members.begin(), members.end());
      if (got != *mine || comm.world_ranks() != *mine) {
        std::string text;
        for (int r : got) text += std::to_string(r) + " ";
        std::fprintf(stderr, "FAIL %s %s on rank %d: communicator members %s\n", layout.name.c_str(),
                     group_kind_name(kind).c_str(), rt.world_rank(), text.c_str());
        ++failures;
      }
    }
    if (rt.world_rank() == 0) std::printf("layout %s: %s\n", layout.name.c_str(), grid.describe().c_str());
  }
  if (layouts == 0) {  // nothing compared is not a pass
    std::fprintf(stderr, "FAIL grid: no Megatron layout for %d ranks in megatron_layouts.h\n", rt.world_size());
    ++failures;
  }
  return failures;
}

int timeout(Runtime& rt) {
  CommOptions options;
  options.timeout_seconds = 0.5;
  int failures = 0;
  {
    MpiCommunicator world(MPI_COMM_WORLD, grid_ranks(rt.world_size()), "world", options);
    if (rt.world_rank() == 0) {
      try {
        world.barrier();
        if (rt.world_size() > 1) {
          std::fprintf(stderr, "FAIL timeout: barrier completed without the other ranks\n");
          ++failures;
        }
      } catch (const Error& e) {
        std::string m = e.message();
        std::printf("rank 0 got the expected error: %s\n", m.c_str());
        if (m.find("barrier") == std::string::npos || m.find("'world'") == std::string::npos ||
            m.find("0.5 s") == std::string::npos) {
          std::fprintf(stderr, "FAIL timeout: message does not name the group and the op: %s\n", m.c_str());
          ++failures;
        }
      }
    } else {
      sleep(2);
      world.barrier();  // matches rank 0's abandoned barrier
    }
  }
  TESSERA_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  return failures;
}

// exec_env NAME: NAME's value in this process's environment as it was at exec (/proc/self/environ:
// what the launcher set, not what MPI_Init may have set since), or "" if absent
std::string exec_env(const std::string& name) {
  std::ifstream in("/proc/self/environ", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = name + "=";
  for (size_t pos = 0; pos < all.size();) {
    size_t end = all.find('\0', pos);
    if (end == std::string::npos) end = all.size();
    if (all.compare(pos, key.size(), key) == 0) return all.substr(pos + key.size(), end - pos - key.size());
    pos = end + 1;
  }
  return "";
}

int local_rank_check(Runtime& rt) {
  std::string source = "OMPI_COMM_WORLD_LOCAL_RANK", expected = exec_env(source);
  if (expected.empty()) expected = exec_env(source = "SLURM_LOCALID");
  std::string node = exec_env("SLURMD_NODENAME");
  std::printf("rank %d: node %s, local rank %d of %d (launcher's %s=%s)\n", rt.world_rank(),
              node.empty() ? "?" : node.c_str(), rt.local_rank(), rt.local_size(), source.c_str(),
              expected.empty() ? "unset" : expected.c_str());
  if (expected.empty() || std::stoi(expected) != rt.local_rank()) {
    std::fprintf(stderr, "FAIL local_rank: rank %d has local rank %d, the launcher says %s\n", rt.world_rank(),
                 rt.local_rank(), expected.empty() ? "nothing" : expected.c_str());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    std::string mode = argc > 1 ? argv[1] : "collectives";
    Runtime& rt = Runtime::get();
    int failures = 0;
    if (mode == "collectives") failures = collectives(rt);
    else if (mode == "grid") failures = grid_mapping(rt);
    else if (mode == "timeout") failures = timeout(rt);
    else if (mode == "local_rank") failures = local_rank_check(rt);
    else TESSERA_CONFIG_FAIL("unknown mode \"", mode, "\"; use collectives, grid, timeout or local_rank");
    int total = 0;
    TESSERA_MPI_CHECK(MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rt.world_rank() == 0)
      std::printf("%s on %d ranks: %s (%d failures)\n", mode.c_str(), rt.world_size(), total ? "FAILED" : "passed", total);
    return total == 0 ? 0 : 1;
  });
}
