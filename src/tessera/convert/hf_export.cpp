#include "tessera/convert/hf_export.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/convert/checkpoint_writer.h"
#include "tessera/convert/convert_options.h"
#include "tessera/convert/hf_family.h"
#include "tessera/convert/hf_layout.h"
#include "tessera/convert/safetensors_stream_writer.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera::convert {

namespace fs = std::filesystem;

uint64_t parse_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  const std::map<std::string, double> units = {{"", 1},       {"B", 1},        {"KB", 1e3},        {"MB", 1e6},
                                               {"GB", 1e9},   {"TB", 1e12},    {"KiB", 1024.0},    {"MiB", 1048576.0},
                                               {"GiB", 1073741824.0}};
  auto it = units.find(unit);
  if (used == 0 || it == units.end() || value <= 0)
    TESSERA_CONFIG_FAIL("--max-shard-size '", text, "' is not a size; use e.g. 200MB, 5GB, 500KB or a byte count");
  return static_cast<uint64_t>(value * it->second);
}

namespace {

void write_json(const fs::path& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) TESSERA_FAIL("cannot write ", path.string());
}

struct Planned {
  const models::HfTensorName* name;
  Shape global_shape;  // Tessera
  Shape hf_shape;
  uint64_t bytes;
};

}  // namespace

ExportResult export_hf(const fs::path& checkpoint, const fs::path& output, const ExportOptions& options) {
  const fs::path folder = resolve_checkpoint_folder(checkpoint, options.iteration);
  if (fs::exists(output) && !(fs::is_directory(output) && fs::is_empty(output)))
    TESSERA_CONFIG_FAIL("output ", output.string(), " already exists and is not empty; choose another --output");
  ckpt::CheckpointReader reader(folder);
  const std::string common = (folder / "common.h5").string();
  auto info = reader.model_info();
  const int64_t vocab = stored_vocab_size(reader);
  const std::string toml = reader.config_toml();
  const train::Config config = conversion_config(stored_keys(toml, {"model"}, common), vocab);
  const HfFamily& family = hf_family_for_model(config.model, common);
  const DType dtype = parse_params_dtype(options.params_dtype, "--params-dtype");
  const std::string st_dtype = dtype == DType::f32 ? "F32" : dtype == DType::bf16 ? "BF16" : "F16";
  const HfLayoutContext ctx{config.model.num_attention_heads, vocab, config.model.num_query_groups};

  // Plan: every tensor's HF shape from the saved global shapes, then HF's shard split (in state-dict
  // order; a new shard when the next tensor would pass the limit; an oversized tensor alone).
  const std::vector<models::HfTensorName> names = family.tensor_names(config.model);
  std::map<std::string, ckpt::CheckpointReader::TensorEntry> saved;
  for (auto& e : reader.tensors())
    if (e.kind == "param") saved[e.name] = e;
  std::vector<Planned> plan;
  for (const auto& n : names) {
    auto it = saved.find(n.tessera);
    if (it == saved.end()) TESSERA_CONFIG_FAIL(folder.string(), ": the checkpoint has no tensor '", n.tessera, "'");
    Shape hf = hf_part_shape(n, it->second.global_shape, ctx);
    plan.push_back({&n, it->second.global_shape, hf, static_cast<uint64_t>(shape_numel(hf)) * dtype_size(dtype)});
  }
  std::vector<std::vector<size_t>> shards(1);
  uint64_t current = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (!shards.back().empty() && current + plan[i].bytes > options.max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += plan[i].bytes;
  }

  const fs::path tmp = output.string() + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (!fs::is_directory(tmp)) TESSERA_CONFIG_FAIL("cannot create ", tmp.string(), ": ", ec.message());
  struct Cleanup {
    fs::path dir;
    bool keep = false;
    ~Cleanup() {
      std::error_code ec;
      if (!keep) fs::remove_all(dir, ec);
    }
  } cleanup{tmp};

  ExportResult result;
  result.shards = static_cast<int>(shards.size());
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<float> global, full_hf, hf;
  std::string full_hf_of;  // the Tessera tensor full_hf holds in HF order (fused tensors: several parts)
  std::vector<uint16_t> half;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    if (shards.size() == 1) std::snprintf(name, sizeof name, "model.safetensors");
    else std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::vector<SafetensorsEntry> entries;
    std::map<std::string, const Planned*> by_hf;
    for (size_t i : shards[s]) {
      entries.push_back({plan[i].name->hf, st_dtype, plan[i].hf_shape});
      by_hf[plan[i].name->hf] = &plan[i];
      weight_map[plan[i].name->hf] = name;
    }
    SafetensorsStreamWriter writer(tmp / name, std::move(entries));
    for (const SafetensorsEntry& e : writer.order()) {
      const Planned& p = *by_hf.at(e.name);
      const std::string& tname = p.name->tessera;
      if (full_hf_of != tname) {
        Shape shape;
        global = reader.read_global(reader.has("main_param", tname) ? "main_param" : "param", tname, shape);
        full_hf.resize(static_cast<size_t>(shape_numel(hf_shape(p.name->layout, shape, ctx))));
        tessera_to_hf(p.name->layout, global.data(), shape, ctx, full_hf.data());
        full_hf_of = tname;
      }
      const size_t count = static_cast<size_t>(shape_numel(p.hf_shape));
      const size_t first = p.name->rows > 0 ? static_cast<size_t>(p.name->row_begin) * (count / p.name->rows) : 0;
      hf.assign(full_hf.begin() + static_cast<std::ptrdiff_t>(first),
                full_hf.begin() + static_cast<std::ptrdiff_t>(first + count));
      const std::byte* bytes = reinterpret_cast<const std::byte*>(hf.data());
      size_t nbytes = hf.size() * sizeof(float);
      if (dtype != DType::f32) {
        half.resize(hf.size());
        for (size_t i = 0; i < hf.size(); ++i)
          half[i] = dtype == DType::bf16 ? float_to_bf16(hf[i]).bits : float_to_f16(hf[i]).bits;
        bytes = reinterpret_cast<const std::byte*>(half.data());
        nbytes = half.size() * sizeof(uint16_t);
      }
      writer.write(e.name, {bytes, nbytes});
      ++result.tensors;
      result.bytes += nbytes;
    }
    writer.finish();
  }
  if (shards.size() > 1)
    write_json(tmp / "model.safetensors.index.json",
               {{"metadata", {{"total_size", result.bytes}}}, {"weight_map", weight_map}});
  nlohmann::json hf_config = family.hf_config(config.model, vocab);
  hf_config["dtype"] = dtype == DType::f32 ? "float32" : dtype == DType::bf16 ? "bfloat16" : "float16";
  write_json(tmp / "config.json", hf_config);
  write_json(tmp / "generation_config.json", {{"_from_model_config", true},
                                                {"bos_token_id", hf_config["bos_token_id"]},
                                                {"eos_token_id", hf_config["eos_token_id"]}});
  // The tokenizer the checkpoint was trained with, when its files are still where the config says.
  const auto data_keys = stored_keys(toml, {"data"}, common);
  auto stored_string = [&](const std::string& key) -> std::string {
    for (const std::string& kv : data_keys)
      if (kv.rfind(key + "=", 0) == 0) {
        std::string v = kv.substr(key.size() + 1);
        return v.size() >= 2 && v.front() == '"' ? v.substr(1, v.size() - 2) : v;
      }
    return "";
  };
  if (stored_string("data.tokenizer_type") == "GPT2BPETokenizer") {
    const std::string vocab_file = stored_string("data.vocab_file"), merge_file = stored_string("data.merge_file");
    if (!vocab_file.empty() && !merge_file.empty() && fs::exists(vocab_file) && fs::exists(merge_file)) {
      fs::copy_file(vocab_file, tmp / "vocab.json");
      fs::copy_file(merge_file, tmp / "merges.txt");
      write_json(tmp / "tokenizer_config.json", {{"tokenizer_class", "GPT2Tokenizer"},
                                                   {"model_max_length", config.model.max_position_embeddings},
                                                   {"bos_token", "<|endoftext|>"},
                                                   {"eos_token", "<|endoftext|>"},
                                                   {"unk_token", "<|endoftext|>"}});
    }
  }
  if (fs::exists(output)) fs::remove(output, ec);  // an empty folder
  fs::rename(tmp, output, ec);
  if (ec) TESSERA_FAIL("renaming ", tmp.string(), " to ", output.string(), ": ", ec.message());
  cleanup.keep = true;
  return result;
}

}  // namespace tessera::convert
