// The resolved, validated configuration of a run: one immutable struct per concern, parsed once
// from TOML plus --set overrides (config_schema.h lists every key). Every error is a ConfigError
// naming the file and key and what is allowed.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tessera/models/loss_registry.h"
#include "tessera/models/transformer_config.h"
#include "tessera/runtime/parallel_config.h"
#include "tessera/train/config_schema.h"

namespace tessera::train {

using ModelConfig = models::TransformerConfig;  // [model]: the transformer's shape and layer spec
using ParallelConfig = tessera::ParallelConfig;

struct TrainingConfig {
  int64_t micro_batch_size, global_batch_size, train_iters;
  std::string precision;
  bool precision_defaulted = false;  // training.precision not set: bf16, or fp32 on a CPU-only run
  int64_t seed, eval_interval, eval_iters;
  std::string device;
  double peak_tflops_per_device;
  bool deterministic_mode = false;   // training.deterministic_mode (ops/deterministic_mode.h)
  std::string loss;                  // training.loss (models/loss_registry.h)
  models::LossParams loss_params;    // its [loss] values
};

struct OptimizerConfig {
  std::string optimizer;
  double lr, min_lr;
  std::string lr_decay_style;
  int64_t lr_warmup_iters, lr_decay_iters, lr_wsd_decay_iters;
  std::string lr_wsd_decay_style;
  double weight_decay, adam_beta1, adam_beta2, adam_eps, clip_grad;
};

struct DataConfig {
  std::vector<DataPathEntry> data_path;
  std::string split, tokenizer_type, vocab_file, merge_file;
  bool mock_data;
  int64_t vocab_size;
  std::string data_cache_path;
  bool eod_mask_loss, reset_position_ids, reset_attention_mask;  // Megatron's end-of-document options (data/document_masks.h)
  std::string tokenizer_model;          // SentencePieceTokenizer's model file
  int64_t vocab_extra_ids = -1;         // sentinels (the key's -1 resolves to 100 for t5, else 0)
  double mask_prob = 0.15, short_seq_prob = 0.1;  // bert / t5 datasets
};

struct CheckpointConfig {
  std::string save, load;
  int64_t save_interval;
  bool no_load_optim, no_load_rng, finetune;
};

struct LoggingConfig {
  int64_t log_interval;
  std::string metrics_file;
  std::string tensorboard_dir;  // "" or a folder for TensorBoard event files (tensorboard.h)
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainingConfig training;
  OptimizerConfig optimizer;
  DataConfig data;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  std::map<std::string, ConfigValue> values;  // "section.key" -> value, every key of the schema
  std::string source;                         // the config file ("" when none)

  std::string to_toml() const;  // the resolved config, every key, grouped by table
};

// Parses `path` ("" = defaults only), applies overrides ("table.key=value", value as a TOML literal;
// a bare word is taken as a string), then checks types, unsupported keys and cross-key rules that
// need no world size. Relative file paths in [data] are resolved against the config file's folder
// when they do not exist relative to the working directory.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);

// One value as written after "=" in --set (a TOML literal; a bare word is a string), checked
// against the key's type; errors are prefixed with `where`.
ConfigValue parse_value_text(const KeySpec& spec, const std::string& raw, const std::string& where);
// Applies "table.key=value" to a values map (every key of the schema), as --set does.
void apply_override(const std::string& text, std::map<std::string, ConfigValue>& values);
// The [model] keys whose default depends on model.architecture, with that architecture's values
// (t5: relative positions, rmsnorm, relu, no biases; others: none, the schema defaults apply).
std::vector<std::pair<std::string, ConfigValue>> architecture_layer_defaults(const std::string& architecture);

// training.precision left unset defaults to bf16 on CUDA and to fp32 on a CPU-only run (bf16 on the
// CPU is emulated and slow); the Trainer calls this with its device and it says so on the output rank.
void resolve_default_precision(Config& config, bool cuda);

// Checks that need the world size (divisibility of the parallel layout and the batch).
void validate_for_world(const Config& config, int world_size);

}  // namespace tessera::train
