// TensorParallel: the small view of the parallel layout that tensor-parallel layers need (the
// tensor group's communicator, its size and this rank's place in it, sequence parallelism on/off).
// A default-constructed view is TP = 1 (no communicator): layers then run exactly as single-rank.
#pragma once
#include <cstdint>

#include "tessera/runtime/communicator.h"

namespace tessera::parallel {

class ParallelContext;
}  // namespace tessera::parallel
namespace tessera::parallel {

struct TensorParallel {
  Communicator* comm = nullptr;  // the tensor group; null when size == 1
  int size = 1;
  int rank = 0;
  bool sequence_parallel = false;  // LayerNorm, dropout and residual on s/tp tokens (needs size > 1)

  bool enabled() const { return size > 1; }
  // Rows [first_row, first_row + n / size) of n sequence-major rows belong to this rank under SP.
  int64_t local_rows(int64_t n) const { return sequence_parallel ? n / size : n; }
  int64_t first_row(int64_t n) const { return sequence_parallel ? rank * (n / size) : 0; }
};

// The tensor group of ctx (ConfigError for sequence parallelism without TP > 1). Whether a model
// splits over it is the model family's check (models::check_tensor_parallel_split).
TensorParallel tensor_parallel_view(ParallelContext& ctx);

}  // namespace tessera::parallel
