#include "tessera/convert/writer_ranks.h"

#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/runtime.h"

namespace tessera::convert {

WriterRanks WriterRanks::world() {
  if (!Runtime::initialized()) return {};
  return {Runtime::get().world_rank(), Runtime::get().world_size()};
}

std::string WriterRanks::from_leader(const std::string& value) const {
  if (size == 1) return value;
  int length = static_cast<int>(value.size());
  TESSERA_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string out = leader() ? value : std::string(static_cast<size_t>(length), '\0');
  TESSERA_MPI_CHECK(MPI_Bcast(out.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD));
  return out;
}

void WriterRanks::barrier() const {
  if (size > 1) TESSERA_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

}  // namespace tessera::convert
