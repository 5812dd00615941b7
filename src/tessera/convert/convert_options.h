// What tessera-convert's subcommands take (Megatron's option names map onto these fields).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace tessera::convert {

// The target parallel layout and storage of a written Tessera checkpoint.
struct LayoutOptions {
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  int64_t num_layers_per_virtual_pipeline_stage = 0;
  int64_t expert_model_parallel_size = 1;
  int64_t data_parallel_size = 1;
  bool use_distributed_optimizer = false;
  std::optional<std::string> params_dtype;              // fp32 | bf16 | fp16; unset: import fp32, reshard keeps
  std::optional<int64_t> make_vocab_size_divisible_by;  // unset: 128 for import, the stored value for reshard
};

// A Tessera checkpoint to read: the save folder (tracker) or an iter_XXXXXXX folder itself.
// iteration: that iteration's folder instead of the tracker's. ConfigError naming the path.
std::filesystem::path resolve_checkpoint_folder(const std::filesystem::path& path, std::optional<int64_t> iteration);

}  // namespace tessera::convert
