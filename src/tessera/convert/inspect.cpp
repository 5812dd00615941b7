#include "tessera/convert/inspect.h"

#include <iomanip>

#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/ckpt/safetensors.h"
#include "tessera/convert/convert_options.h"
#include "tessera/core/error.h"

namespace tessera::convert {

namespace fs = std::filesystem;

int64_t inspect(const fs::path& path, std::optional<int64_t> iteration, std::ostream& out) {
  const bool hf = fs::is_regular_file(path) || fs::exists(path / "model.safetensors") ||
                  fs::exists(path / "model.safetensors.index.json");
  int64_t count = 0;
  if (hf) {
    auto st = ckpt::SafetensorsCheckpoint::open(path);
    out << "Hugging Face checkpoint " << st.path().string() << " (" << st.files().size() << " file"
        << (st.files().size() == 1 ? "" : "s") << ")\n";
    out << std::left << std::setw(56) << "name" << std::setw(20) << "shape" << std::setw(7) << "dtype" << "file\n";
    for (const std::string& name : st.names()) {
      const auto& info = st.info(name);
      out << std::setw(56) << name << std::setw(20) << shape_string(info.shape) << std::setw(7) << info.dtype
          << st.file_of(name).path().filename().string() << "\n";
      ++count;
    }
    return count;
  }
  const fs::path folder = resolve_checkpoint_folder(path, iteration);
  ckpt::CheckpointReader reader(folder);
  const auto& l = reader.saved_layout();
  out << "Tessera checkpoint " << folder.string() << " (iteration " << reader.iteration() << ", TP=" << l.tp_size
      << " PP=" << l.pp_size << " DP=" << l.dp_size << (l.ep_size > 1 ? " EP=" + std::to_string(l.ep_size) : "")
      << ", optimizer state: "
      << (reader.has_optimizer() ? (reader.optimizer_scalars().distributed ? "distributed" : "yes") : "no") << ")\n";
  for (const auto& [key, value] : reader.model_info()) out << "  " << key << " = " << value << "\n";
  out << std::left << std::setw(12) << "kind" << std::setw(52) << "name" << std::setw(16) << "global shape"
      << std::setw(6) << "dtype" << std::setw(6) << "split" << std::setw(7) << "shards" << "files\n";
  for (const auto& e : reader.tensors()) {
    out << std::setw(12) << e.kind << std::setw(52) << e.name << std::setw(16) << shape_string(e.global_shape)
        << std::setw(6) << dtype_name(e.dtype) << std::setw(6) << e.split_axis << std::setw(7) << e.shards;
    for (size_t i = 0; i < e.files.size(); ++i) out << (i ? "," : "") << e.files[i];
    out << "\n";
    ++count;
  }
  return count;
}

}  // namespace tessera::convert
