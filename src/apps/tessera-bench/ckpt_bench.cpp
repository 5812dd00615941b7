// tessera-bench ckpt: builds the GPT and its AdamW state (one step, so the moments are not zero),
// then times save_checkpoint and a full load (CheckpointReader: every model tensor and both moments)
// `repeats` times; verifies the loaded bytes by checksum; prints one JSON object per round and a summary.
#include "ckpt_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/ckpt/h5_file.h"
#include "tessera/train/training_checkpoints.h"
#include "tessera/models/gpt.h"
#include "tessera/optim/adamw_optimizer.h"
#include "tessera/optim/param_groups.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/config.h"

namespace tessera::bench {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

uint64_t tensor_checksum(const Tensor& t) {
  return ckpt::data_checksum(t.data(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
}

uint64_t folder_bytes(const fs::path& folder) {
  uint64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.is_regular_file()) bytes += entry.file_size();
  return bytes;
}

}  // namespace

int run_ckpt_bench(const CkptBenchOptions& o) {
  Runtime& runtime = Runtime::init(nullptr, nullptr);
  if (runtime.world_size() != 1) TESSERA_CONFIG_FAIL("tessera-bench ckpt runs on one rank (got ", runtime.world_size(), ")");
  train::Config config = train::load_config(
      "", {"data.mock_data=true", "data.vocab_size=" + std::to_string(o.vocab_size),
           "model.num_layers=" + std::to_string(o.num_layers), "model.hidden_size=" + std::to_string(o.hidden_size),
           "model.num_attention_heads=" + std::to_string(o.num_attention_heads),
           "model.seq_length=" + std::to_string(o.seq_length),
           "model.max_position_embeddings=" + std::to_string(o.seq_length)});
  parallel::ParallelContext context(config.parallel, 1, 0, Device::cpu());

  auto build_start = Clock::now();
  models::GPTModel model(config.model, o.vocab_size, DType::f32, Device::cpu());
  model.initialize(1234);
  auto& params = model.parameters();
  std::vector<optim::ParamEntry> entries;
  for (const auto& p : params.parameters())
    entries.push_back({p.name, p.value, p.grad, p.weight_decay});  // set at registration
  optim::AdamWOptimizer adamw(std::move(entries));
  // One step with grad = param, so that both moments hold non-zero values.
  std::memcpy(params.all_grads().data(), params.all_values().data(),
              static_cast<size_t>(params.all_values().numel()) * sizeof(float));
  adamw.step(1e-4, 0.01, 0.9, 0.95, 1e-8);
  const int64_t parameters = params.all_values().numel();
  const double build_seconds = since(build_start);

  const bool temporary = o.dir.empty();
  fs::path dir = temporary ? fs::temp_directory_path() / ("tessera_ckpt_bench_" + std::to_string(::getpid())) : fs::path(o.dir);
  const ckpt::TrainerOptimizer optimizer{&adamw, nullptr, false};
  const uint64_t values_sum = tensor_checksum(params.all_values());
  const uint64_t m_sum = tensor_checksum(adamw.exp_avg_flat()), v_sum = tensor_checksum(adamw.exp_avg_sq_flat());
  std::printf("{\"benchmark\": \"ckpt\", \"parameters\": %lld, \"layers\": %lld, \"hidden\": %lld, \"heads\": %lld, "
              "\"vocab\": %lld, \"padded_vocab\": %lld, \"seq\": %lld, \"build_seconds\": %.3f, \"dir\": \"%s\"}\n",
              static_cast<long long>(parameters), static_cast<long long>(o.num_layers),
              static_cast<long long>(o.hidden_size), static_cast<long long>(o.num_attention_heads),
              static_cast<long long>(o.vocab_size), static_cast<long long>(model.padded_vocab_size()),
              static_cast<long long>(o.seq_length), build_seconds, dir.string().c_str());

  double best_save = 0, best_load = 0, sum_save = 0, sum_load = 0;
  uint64_t bytes = 0;
  int failures = 0;
  for (int round = 1; round <= o.repeats; ++round) {
    ckpt::SaveRequest request;
    request.save_dir = dir;
    request.iteration = round;
    request.coords = ckpt::coordinates_of(context);
    request.model = ckpt::model_shards(params);
    ckpt::OptimizerState state = ckpt::optimizer_state(optimizer, params);
    request.optimizer = &state;
    request.progress.iteration = round;
    request.metadata.config_toml = config.to_toml();
    request.keep_last_n = 1;
    auto save_start = Clock::now();
    ckpt::SaveResult saved = ckpt::save_checkpoint(request, context.world());
    const double save_seconds = since(save_start);
    bytes = folder_bytes(saved.folder);

    // Load into zeroed buffers: every model tensor and both moments, as the trainer does.
    std::memset(params.all_values().data(), 0, static_cast<size_t>(parameters) * sizeof(float));
    std::memset(adamw.exp_avg_flat().data(), 0, static_cast<size_t>(parameters) * sizeof(float));
    std::memset(adamw.exp_avg_sq_flat().data(), 0, static_cast<size_t>(parameters) * sizeof(float));
    auto load_start = Clock::now();
    ckpt::CheckpointReader reader(saved.folder);
    for (const ckpt::TensorShard& shard : ckpt::model_shards(params)) reader.read_model(shard);
    for (const ckpt::OptimizerSlice& slice : state.slices) {
      reader.read_optimizer("exp_avg", slice, slice.exp_avg);
      reader.read_optimizer("exp_avg_sq", slice, slice.exp_avg_sq);
    }
    const double load_seconds = since(load_start);
    const bool same = tensor_checksum(params.all_values()) == values_sum &&
                      tensor_checksum(adamw.exp_avg_flat()) == m_sum && tensor_checksum(adamw.exp_avg_sq_flat()) == v_sum;
    failures += same ? 0 : 1;
    const double mb = static_cast<double>(bytes) / 1e6;
    std::printf("{\"round\": %d, \"bytes\": %llu, \"save_seconds\": %.3f, \"save_MBps\": %.1f, \"load_seconds\": %.3f, "
                "\"load_MBps\": %.1f, \"loaded_equals_saved\": %s}\n",
                round, static_cast<unsigned long long>(bytes), save_seconds, mb / save_seconds, load_seconds,
                mb / load_seconds, same ? "true" : "false");
    std::fflush(stdout);
    best_save = std::max(best_save, mb / save_seconds);
    best_load = std::max(best_load, mb / load_seconds);
    sum_save += save_seconds;
    sum_load += load_seconds;
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("{\"summary\": true, \"bytes\": %llu, \"rounds\": %d, \"mean_save_seconds\": %.3f, \"mean_save_MBps\": %.1f, "
              "\"best_save_MBps\": %.1f, \"mean_load_seconds\": %.3f, \"mean_load_MBps\": %.1f, \"best_load_MBps\": %.1f}\n",
              static_cast<unsigned long long>(bytes), o.repeats, sum_save / o.repeats, mb * o.repeats / sum_save,
              best_save, sum_load / o.repeats, mb * o.repeats / sum_load, best_load);
  if (temporary) fs::remove_all(dir);
  TESSERA_CHECK(failures == 0, failures, " of ", o.repeats, " rounds loaded state that differs from what was saved");
  return 0;
}

}  // namespace tessera::bench
