// export-hf: a Tessera checkpoint (any layout) -> a Hugging Face model folder: config.json,
// generation_config.json, model.safetensors or shards of at most max_shard_bytes with
// model.safetensors.index.json, and the GPT-2 BPE tokenizer files when the stored config names
// them. Written into OUTPUT.tmp-<pid>/ and renamed to OUTPUT when complete.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

namespace tessera::convert {

struct ExportOptions {
  std::optional<int64_t> iteration;
  uint64_t max_shard_bytes = 5ull << 30;  // HF's default (5GB)
  std::string params_dtype = "fp32";
};

struct ExportResult {
  int shards = 0;
  int64_t tensors = 0;
  uint64_t bytes = 0;
};

ExportResult export_hf(const std::filesystem::path& checkpoint, const std::filesystem::path& output,
                       const ExportOptions& options);

// "200MB", "10GB", "500KB", "1234" (bytes); HF's decimal units (KB = 1000), KiB/MiB/GiB binary.
// ConfigError naming --max-shard-size otherwise.
uint64_t parse_size(const std::string& text);

}  // namespace tessera::convert
