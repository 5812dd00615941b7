// inspect (= Megatron's --print-checkpoint-structure): every tensor of a Tessera checkpoint or a
// Hugging Face folder with its name, global shape, dtype, tensor-parallel split axis and shards.
#pragma once
#include <filesystem>
#include <optional>
#include <ostream>

namespace tessera::convert {

// Returns the number of tensors listed. ConfigError when path is neither kind of checkpoint.
int64_t inspect(const std::filesystem::path& path, std::optional<int64_t> iteration, std::ostream& out);

}  // namespace tessera::convert
