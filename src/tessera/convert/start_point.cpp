#include "tessera/convert/start_point.h"

#include <mpi.h>

#include <filesystem>
#include <set>
#include <toml++/toml.h>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/h5_file.h"
#include "tessera/ckpt/load_target.h"
#include "tessera/convert/hf_family.h"
#include "tessera/convert/hf_import.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/runtime.h"

namespace tessera::convert {

namespace fs = std::filesystem;

namespace {

// The [model] keys the user set: in the config file or with --set.
std::set<std::string> user_model_keys(const std::string& path, const std::vector<std::string>& overrides) {
  std::set<std::string> keys;
  for (const std::string& o : overrides)
    if (o.rfind("model.", 0) == 0) keys.insert(o.substr(0, o.find('=')));
  if (!path.empty()) {
    toml::table root = toml::parse_file(path);  // load_config already parsed it successfully
    if (const toml::table* model = root["model"].as_table())
      for (const auto& [key, node] : *model) keys.insert("model." + std::string(key.str()));
  }
  return keys;
}

// checkpoint.load as the trainer reads it: the checkpoint folder (its tracker) or an iter_ folder.
std::optional<fs::path> resumable(const std::string& load) {
  if (load.empty()) return std::nullopt;
  ckpt::LoadTarget target = ckpt::resolve_load_target(load);
  if (!target.which) return std::nullopt;
  return ckpt::checkpoint_folder(target.dir, *target.which);
}

}  // namespace

StartPoint start_point(const train::Config& config, const std::vector<std::string>& overrides) {
  const std::string hf = std::get<std::string>(config.values.at("checkpoint.pretrained_hf"));
  std::vector<std::string> keys, extra;
  if (auto folder = resumable(config.checkpoint.load)) {
    const fs::path common = *folder / ckpt::kCommonFile;
    std::string toml;
    try {  // only common.h5: the trainer opens (and reports problems with) the shard files
      ckpt::h5_quiet();
      ckpt::H5Id file = ckpt::h5_open_file_read(common.string());
      toml = ckpt::h5_read_string(file.get(), "config_toml");
    } catch (const Error&) {
      return {};  // the trainer's load reports the broken checkpoint on every rank together
    }
    keys = stored_keys(toml, {"model"}, common.string());
  } else if (!hf.empty()) {
    const nlohmann::json json = read_hf_config_json(hf);
    const std::string path = (fs::path(hf) / "config.json").string();
    const HfFamily& family = hf_family(json.value("model_type", ""), path);
    int64_t vocab = 0;
    keys = family.model_keys(json, path, vocab);
    if (config.checkpoint.save.empty())
      TESSERA_CONFIG_FAIL("checkpoint.pretrained_hf needs checkpoint.save (the imported weights are written to "
                          "<save>/pretrained_hf)");
    const fs::path imported = fs::path(config.checkpoint.save) / "pretrained_hf";
    if (Runtime::get().world_rank() == 0 && !ckpt::read_tracker(imported)) {
      log::info("importing ", hf, " into ", imported.string());
      import_hf(hf, imported, LayoutOptions{});
    }
    TESSERA_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));  // the import is complete
    extra = {"checkpoint.load=\"" + imported.string() + "\"", "checkpoint.finetune=true"};
  } else {
    return {};
  }
  const std::set<std::string> user = user_model_keys(config.source, overrides);
  StartPoint out;
  for (const std::string& kv : keys)
    if (!user.count(kv.substr(0, kv.find('=')))) out.defaults.push_back(kv);
  out.forced = extra;
  return out;
}

}  // namespace tessera::convert
