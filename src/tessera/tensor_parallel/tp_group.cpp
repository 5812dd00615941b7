#include "tessera/tensor_parallel/tp_group.h"

#include "tessera/core/error.h"
#include "tessera/runtime/parallel_context.h"

namespace tessera::parallel {

TensorParallel tensor_parallel_view(ParallelContext& ctx) {
  TensorParallel tp;
  tp.size = ctx.tp_size();
  tp.rank = ctx.tp_rank();
  tp.sequence_parallel = ctx.sequence_parallel();
  if (tp.sequence_parallel && tp.size == 1)
    TESSERA_CONFIG_FAIL("parallel.sequence_parallel = true needs parallel.tensor_model_parallel_size > 1");
  tp.comm = tp.size > 1 ? &ctx.tensor() : nullptr;
  return tp;
}

}  // namespace tessera::parallel
