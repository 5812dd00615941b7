#include "tessera/pipeline/pipeline_training.h"

#include <cstring>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/pipeline/schedule_check.h"
#include "tessera/pipeline/schedule_interleaved.h"

namespace tessera::parallel {

namespace {
// The tied embedding on this rank of the embedding group: the input embedding (first stage) or
// its copy (last stage).
int tied_embedding_index(const nn::ParameterStore& store, ParallelContext& context) {
  std::vector<int> tied = store.tied_embeddings();
  TESSERA_CHECK(tied.size() == 1, "pipeline stage ", context.pp_rank(), " of ", context.pp_size(), " is in the ",
                "embedding group but holds ", tied.size(), " tied-embedding parameters (expected one)");
  return tied[0];
}
}  // namespace

void setup_pipeline_training(models::StageModel& model, ParallelContext& context, int64_t num_micro_batches) {
  const int pp = context.pp_size();
  if (pp == 1) return;
  const auto& pipeline_groups = context.grid().groups(GroupKind::pipeline);
  TESSERA_CHECK(!pipeline_groups.empty() && pipeline_groups[0].front() == 0, "the first pipeline group must hold rank 0");
  log::set_output_rank(pipeline_groups[0].back());  // last stage, tp = dp = 0: where losses are computed

  const int V = model.num_chunks();
  if (V > 1) check_interleaved_micro_batches(pp, num_micro_batches, pp);
  verify_pipeline_schedules(pp, V, num_micro_batches, false);
  verify_pipeline_schedules(pp, V, num_micro_batches, true);

  // An untied output layer (every rank of the model has the same config: none holds a tied
  // embedding) has nothing to keep equal across the embedding group.
  if (context.grid().in_group(GroupKind::embedding) && !model.parameters().tied_embeddings().empty()) {
    auto& store = model.parameters();
    context.embedding().broadcast(store.value(tied_embedding_index(store, context)), 0);
  }
}

void all_reduce_tied_embedding_grads(nn::ParameterStore& store, ParallelContext& context) {
  if (context.pp_size() == 1 || !context.grid().in_group(GroupKind::embedding) || store.tied_embeddings().empty())
    return;
  context.embedding().all_reduce(store.grad(tied_embedding_index(store, context)));
}

double value_from_last_stage(ParallelContext& context, double value) {
  if (context.pp_size() == 1) return value;
  int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  bits = value_from_last_stage(context, bits);
  std::memcpy(&value, &bits, sizeof(bits));
  return value;
}

int64_t value_from_last_stage(ParallelContext& context, int64_t value) {
  if (context.pp_size() == 1) return value;
  Tensor t(&value, DType::i64, {1});
  context.pipeline().broadcast(t, context.pp_size() - 1);
  return value;
}

int64_t pipeline_flops_parameter_count(const nn::ParameterStore& store, ParallelContext& context) {
  // Global (unsplit) sizes: every TP rank of a stage counts the whole parameter, so the sum over
  // this rank's pipeline group (one TP rank per stage) counts each parameter of the model once.
  const auto global_size = [&](int i) { return shape_numel(store.parameters()[static_cast<size_t>(i)].global_shape); };
  int64_t n = store.global_numel();
  for (int i = 0; i < static_cast<int>(store.parameters().size()); ++i) {
    const nn::ParameterRoles& roles = store.parameters()[static_cast<size_t>(i)].roles;
    if (roles.position_embedding || !roles.copy_of.empty() || roles.reduce_group == nn::ReduceGroup::expert_data)
      n -= global_size(i);
  }
  if (context.pp_size() == 1) return n;
  Tensor t(&n, DType::i64, {1});
  context.pipeline().all_reduce(t);
  return n;
}

void log_pipeline_activation_memory(ParallelContext& context, const ForwardBackwardResult& measured,
                                    int64_t num_micro_batches) {
  const int pp = context.pp_size();
  std::vector<int64_t> mine = {static_cast<int64_t>(measured.peak_activation_bytes),
                               measured.peak_in_flight_micro_batches};
  std::vector<int64_t> all(static_cast<size_t>(2 * pp));
  if (pp == 1) all = mine;
  else context.pipeline().all_gather(Tensor(mine.data(), DType::i64, {2}), Tensor(all.data(), DType::i64, {2 * pp}));
  std::ostringstream line;
  line.precision(3);
  line << std::fixed << "peak activation memory per pipeline stage (measured in iteration 1, " << num_micro_batches
       << " micro-batches):";
  for (int r = 0; r < pp; ++r)
    line << (r ? "," : "") << " stage " << r << ": " << static_cast<double>(all[static_cast<size_t>(2 * r)]) / (1 << 20)
         << " MiB (" << all[static_cast<size_t>(2 * r + 1)] << " micro-batches in flight)";
  log::info(line.str());
}

}  // namespace tessera::parallel
