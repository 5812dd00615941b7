#include "tessera/convert/reshard.h"

#include <algorithm>

#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/convert/checkpoint_writer.h"
#include "tessera/convert/hf_family.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/error.h"
#include "tessera/models/vocab.h"

namespace tessera::convert {

namespace fs = std::filesystem;

namespace {

// The saved tensor `name` of `kind` fitted to `want` rows (vocabulary padding differs with TP).
std::vector<float> fitted(const ckpt::CheckpointReader& reader, const std::string& kind, const std::string& name,
                          const models::CheckpointTensor& t) {
  Shape saved;
  std::vector<float> values = reader.read_global(kind, name, saved);
  if (saved == t.global_shape) return values;
  bool rows_only = t.vocab_rows && saved.size() == t.global_shape.size();
  for (size_t i = 1; rows_only && i < saved.size(); ++i) rows_only = saved[i] == t.global_shape[i];
  if (!rows_only)
    TESSERA_CONFIG_FAIL(reader.folder().string(), ": tensor '", name, "' has global shape ", shape_string(saved),
                        ", the stored config gives ", shape_string(t.global_shape));
  const int64_t row = shape_numel(t.global_shape) / t.global_shape[0];
  std::vector<float> out(static_cast<size_t>(shape_numel(t.global_shape)), 0.0f);
  std::copy_n(values.data(), std::min(saved[0], t.global_shape[0]) * row, out.data());
  return out;
}

}  // namespace

ReshardResult reshard(const fs::path& input, std::optional<int64_t> iteration, const fs::path& output,
                      const LayoutOptions& options, bool no_optim, const WriterRanks& ranks) {
  const fs::path folder = resolve_checkpoint_folder(input, iteration);
  ckpt::CheckpointReader reader(folder);
  const std::string common = (folder / "common.h5").string();
  auto info = reader.model_info();
  const int64_t vocab = stored_vocab_size(reader);
  const std::string toml = reader.config_toml();
  std::vector<std::string> keys = stored_keys(toml, {"model"}, common);
  std::string saved_dtype = "f32";
  for (const auto& e : reader.tensors())
    if (e.kind == "param") saved_dtype = std::string(dtype_name(e.dtype));
  const DType dtype = parse_params_dtype(options.params_dtype.value_or(saved_dtype), "--params-dtype");
  const std::string precision = dtype == DType::f32 ? "fp32" : dtype == DType::bf16 ? "bf16" : "fp16";
  std::map<std::string, std::string> layout_keys = {
      {"parallel.tensor_model_parallel_size", std::to_string(options.tensor_model_parallel_size)},
      {"parallel.pipeline_model_parallel_size", std::to_string(options.pipeline_model_parallel_size)},
      {"parallel.expert_model_parallel_size", std::to_string(options.expert_model_parallel_size)},
      {"parallel.num_layers_per_virtual_pipeline_stage", std::to_string(options.num_layers_per_virtual_pipeline_stage)},
      {"parallel.pipeline_layer_split", "\"\""},
      {"parallel.use_distributed_optimizer", options.use_distributed_optimizer ? "true" : "false"},
      {"training.precision", "\"" + precision + "\""}};
  if (options.make_vocab_size_divisible_by)
    layout_keys["model.make_vocab_size_divisible_by"] = std::to_string(*options.make_vocab_size_divisible_by);
  for (const auto& [k, v] : layout_keys) keys.push_back(k + "=" + v);
  const train::Config config = conversion_config(keys, vocab);
  if (options.expert_model_parallel_size != 1 && config.model.num_experts == 0)
    TESSERA_CONFIG_FAIL("--expert-model-parallel-size ", options.expert_model_parallel_size,
                        ": this model has no experts");
  const HfFamily& family = hf_family_for_architecture(config.model.architecture, common);
  const std::vector<models::CheckpointTensor> tensors = family.checkpoint_tensors(config, vocab);

  const bool optimizer = reader.has_optimizer() && !no_optim;
  TargetLayout target{static_cast<int>(options.tensor_model_parallel_size),
                      static_cast<int>(options.pipeline_model_parallel_size),
                      static_cast<int>(options.expert_model_parallel_size),
                      static_cast<int>(options.data_parallel_size), options.use_distributed_optimizer,
                      config.model.num_experts};
  CheckpointWriter writer(output, reader.iteration(), target, dtype, optimizer, ranks);
  ReshardResult result;
  for (const models::CheckpointTensor& t : tensors) {
    ++result.tensors;
    if (!writer.wants(t)) continue;  // another rank's files hold it
    auto source = [&](const std::string& kind) {
      if (!reader.has(kind, t.name) && !t.copy_of.empty()) return t.copy_of;
      return t.name;
    };
    const bool has_main = reader.has("main_param", source("main_param"));
    {
      std::vector<float> values = fitted(reader, has_main ? "main_param" : "param",
                                         has_main ? source("main_param") : source("param"), t);
      writer.write_param(t, values.data());
      if (optimizer && (has_main || dtype != DType::f32)) writer.write_optimizer("main_param", t, values.data());
    }
    if (optimizer)
      for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
        if (!reader.has(kind, source(kind)))
          TESSERA_CONFIG_FAIL(folder.string(), ": no ", kind, " for tensor '", t.name,
                              "'; use --no-optim to drop the optimizer state");
        std::vector<float> values = fitted(reader, kind, source(kind), t);
        writer.write_optimizer(kind, t, values.data());
      }
  }

  CommonInfo c;
  c.progress = reader.progress();
  if (optimizer) c.optimizer = reader.optimizer_scalars();
  c.metadata.scheduler = reader.scheduler();
  c.metadata.scheduler_names = reader.scheduler_names();
  c.metadata.model = info;
  c.metadata.model["vocab_size"] = vocab;
  c.metadata.model["num_layers"] = config.model.num_layers;
  c.metadata.model["hidden_size"] = config.model.hidden_size;
  c.metadata.model["num_attention_heads"] = config.model.num_attention_heads;
  c.metadata.model["seq_length"] = config.model.seq_length;
  c.metadata.model["padded_vocab_size"] = models::padded_vocab_size(
      vocab, config.model.make_vocab_size_divisible_by, options.tensor_model_parallel_size);
  c.metadata.params_dtype = std::string(dtype_name(dtype));
  c.metadata.config_toml = replace_toml_keys(toml, layout_keys, common);
  result.folder = writer.commit(c);
  return result;
}

}  // namespace tessera::convert
