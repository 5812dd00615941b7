#include "tessera/parallel/tp_group.h"

#include "tessera/core/error.h"
#include "tessera/parallel/parallel_context.h"
#include "tessera/train/config.h"

namespace tessera::parallel {

namespace {
void check_divisible(int64_t value, const char* key, int64_t tp) {
  if (value % tp != 0)
    TESSERA_CONFIG_FAIL(key, " = ", value, " is not divisible by parallel.tensor_model_parallel_size = ", tp,
                        "; choose a tensor-parallel size that divides it");
}
}  // namespace

TensorParallel tensor_parallel_view(ParallelContext& ctx, const train::Config* config) {
  TensorParallel tp;
  tp.size = ctx.tp_size();
  tp.rank = ctx.tp_rank();
  tp.sequence_parallel = ctx.sequence_parallel();
  if (tp.sequence_parallel && tp.size == 1)
    TESSERA_CONFIG_FAIL("parallel.sequence_parallel = true needs parallel.tensor_model_parallel_size > 1");
  if (config) {
    const auto& m = config->model;
    check_divisible(m.num_attention_heads, "model.num_attention_heads", tp.size);
    check_divisible(m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads, "model.num_query_groups",
                    tp.size);
    check_divisible(m.ffn_hidden_size > 0 ? m.ffn_hidden_size : 4 * m.hidden_size, "model.ffn_hidden_size", tp.size);
    if (tp.sequence_parallel) {
      check_divisible(m.seq_length, "model.seq_length (with parallel.sequence_parallel)", tp.size);
      if (ctx.pp_size() > 1)
        TESSERA_CONFIG_FAIL("parallel.sequence_parallel = true with parallel.pipeline_model_parallel_size = ",
                            ctx.pp_size(), " is not supported yet (pipeline messages would carry seq_length / TP "
                            "tokens); set sequence_parallel = false or pipeline_model_parallel_size = 1");
    }
  }
  tp.comm = tp.size > 1 ? &ctx.tensor() : nullptr;
  return tp;
}

}  // namespace tessera::parallel
