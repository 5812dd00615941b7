// import-hf: a Hugging Face model folder (config.json + model.safetensors or a sharded index) ->
// a Tessera checkpoint (tracker + iter_0000000/, weights only) at the target layout and dtype,
// whose stored config carries the model keys (tessera-train finetunes from it without them).
#pragma once
#include <filesystem>

#include "tessera/convert/convert_options.h"
#include "tessera/convert/writer_ranks.h"

namespace tessera::convert {

struct ImportResult {
  std::filesystem::path folder;  // <output>/iter_0000000
  int64_t tensors = 0;           // HF tensors read
  int64_t bytes_written = 0;     // model bytes (all shards)
};

// ConfigError naming the file and tensor for a missing, extra or misshaped tensor, an unsupported
// dtype or model_type, and for a layout that does not fit the model. With several `ranks` (every
// one calls it), each reads and writes only the tensors of its files (writer_ranks.h).
ImportResult import_hf(const std::filesystem::path& hf_dir, const std::filesystem::path& output,
                       const LayoutOptions& layout, const WriterRanks& ranks = {});

}  // namespace tessera::convert
