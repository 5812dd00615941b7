// MPI datatypes and reduction ops for Tessera dtypes: bf16 and f16 travel as 16-bit words and are
// reduced by user-defined MPI_Ops that convert to float, combine, and round back.
#pragma once
#include <mpi.h>

#include "tessera/core/dtype.h"
#include "tessera/runtime/communicator.h"

namespace tessera::detail {

MPI_Datatype mpi_datatype(DType dtype);          // f32, bf16, f16, i32, i64 (throws otherwise)
MPI_Op mpi_reduce_op(DType dtype, ReduceOp op);  // built-in ops, or the 16-bit float user ops

}  // namespace tessera::detail
