#include "tessera/train/tp_report.h"

#include <algorithm>
#include <array>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/logging.h"

namespace tessera::parallel {

void log_parameters_per_model_parallel_rank(ParallelContext& ctx, const nn::ParameterStore& store) {
  Communicator& world = ctx.world();
  const int64_t fields = 4;  // dp rank, tp rank, pp rank, parameter count
  Buffer mine(fields * sizeof(int64_t)), all(static_cast<size_t>(fields * world.size()) * sizeof(int64_t));
  Tensor m = mine.as_tensor(DType::i64, {fields});
  int64_t* v = m.data_as<int64_t>();
  v[0] = ctx.dp_rank();
  v[1] = ctx.tp_rank();
  v[2] = ctx.pp_rank();
  v[3] = store.numel();
  Tensor a = all.as_tensor(DType::i64, {fields * world.size()});
  if (world.size() > 1) world.all_gather(m, a);
  else a = m;
  std::vector<std::array<int64_t, 3>> rows;  // (pp, tp, count) of DP rank 0's replicas
  const int64_t* g = a.data_as<int64_t>();
  for (int r = 0; r < world.size(); ++r)
    if (g[r * fields] == 0) rows.push_back({g[r * fields + 2], g[r * fields + 1], g[r * fields + 3]});
  std::sort(rows.begin(), rows.end());
  for (const auto& row : rows)
    log::info(" > number of parameters on (tensor, pipeline) model parallel rank (", row[1], ", ", row[0],
              "): ", row[2]);
}

}  // namespace tessera::parallel
