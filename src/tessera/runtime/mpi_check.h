// TESSERA_MPI_CHECK: every MPI call goes through it; a failure throws Error with the MPI error
// string and file:line.
#pragma once
#include <mpi.h>

#include "tessera/core/error.h"

namespace tessera::detail {
std::string mpi_error_string(int code);
}

#define TESSERA_MPI_CHECK(call)                                                                     \
  do {                                                                                             \
    int tessera_mpi_rc_ = (call);                                                                  \
    if (tessera_mpi_rc_ != MPI_SUCCESS)                                                            \
      TESSERA_FAIL("MPI call failed: " #call ": ", ::tessera::detail::mpi_error_string(tessera_mpi_rc_)); \
  } while (0)
