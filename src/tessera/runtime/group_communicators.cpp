#include "tessera/runtime/group_communicators.h"

#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/mpi_communicator.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/runtime/nccl_communicator.h"
#endif

namespace tessera {

std::unique_ptr<Communicator> make_communicator(CommBackend backend, MPI_Comm group_comm, std::vector<int> world_ranks,
                                                std::string name, Device device, CommOptions options) {
  if (backend == CommBackend::mpi)
    return std::make_unique<MpiCommunicator>(group_comm, std::move(world_ranks), std::move(name), options);
#ifdef TESSERA_HAVE_CUDA
  return std::make_unique<NcclCommunicator>(group_comm, std::move(world_ranks), std::move(name), device, options);
#else
  (void)device;
  TESSERA_FAIL("group '", name, "': the NCCL backend needs a CUDA build of Tessera (-DTESSERA_CUDA=ON); use the MPI backend");
#endif
}

GroupCommunicators::GroupCommunicators(const ProcessGrid& grid, CommBackend backend, Device device, CommOptions options)
    : grid_(grid), backend_(backend), device_(device), options_(options) {
  int world_size = 0;
  TESSERA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  TESSERA_CHECK(world_size == grid.world_size(), "process grid built for ", grid.world_size(),
                " ranks but MPI_COMM_WORLD has ", world_size);
  for (GroupKind kind : all_group_kinds()) mpi_comms_.push_back(split_into_groups(MPI_COMM_WORLD, grid.groups(kind)));
  comms_.resize(mpi_comms_.size());
}

GroupCommunicators::~GroupCommunicators() {
  comms_.clear();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm& c : mpi_comms_)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
}

Communicator& GroupCommunicators::get(GroupKind kind) {
  int k = static_cast<int>(kind);
  if (!comms_[k]) {
    if (mpi_comms_[k] == MPI_COMM_NULL)
      TESSERA_FAIL("rank ", grid_.rank(), " is not a member of any '", group_kind_name(kind), "' group");
    comms_[k] = make_communicator(backend_, mpi_comms_[k], grid_.group(kind), group_kind_name(kind), device_, options_);
  }
  return *comms_[k];
}

}  // namespace tessera
