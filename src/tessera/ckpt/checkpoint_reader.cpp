// CheckpointReader: indexes a checkpoint folder's datasets by (kind, name); the trainer's loads go
// through read_slices (checkpoint_reader_slices.cpp), which reads only the overlapping saved shards.
#include "tessera/ckpt/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/common_checksum.h"
#include "tessera/ckpt/h5_verified_read.h"
#include "tessera/ckpt/piece_index.h"
#include "tessera/ckpt/shard_header.h"
#include "tessera/ckpt/stored_layout_check.h"
#include "tessera/core/buffer.h"
#include "tessera/core/half.h"
#include "tessera/runtime/device_copy.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(const fs::path& folder) : folder_(folder) {
  h5_quiet();
  fs::path common = folder / kCommonFile;
  TESSERA_CHECK(fs::exists(common), "checkpoint folder ", folder.string(), " has no ", kCommonFile,
                "; it is not a complete Tessera checkpoint");
  try {
    read_common(common);
  } catch (const Error& e) {
    TESSERA_FAIL("checkpoint file ", common.string(), " cannot be read (truncated or corrupt?): ", e.message());
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) {
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name != kCommonFile && name.size() > 3 && name.ends_with(".h5"))
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& expected : expected_files())
    if (std::find(names.begin(), names.end(), expected) == names.end())
      TESSERA_FAIL("checkpoint file ", (folder / expected).string(), " is missing (the checkpoint was saved at TP=",
                   saved_layout_.tp_size, " PP=", saved_layout_.pp_size, " DP=", saved_layout_.dp_size, ")");
  for (const auto& name : names) {
    try {
      index_file(files_.size(), name);
    } catch (const Error& e) {
      TESSERA_FAIL("checkpoint file ", (folder / name).string(), " cannot be read (truncated or corrupt?): ",
                   e.message());
    }
  }
}

std::vector<std::string> CheckpointReader::expected_files() const {
  std::vector<std::string> names;
  ShardCoordinates c = saved_layout_;
  for (c.tp_rank = 0; c.tp_rank < c.tp_size; ++c.tp_rank)
    for (c.pp_rank = 0; c.pp_rank < c.pp_size; ++c.pp_rank)
      for (c.ep_rank = 0; c.ep_rank < c.ep_size; ++c.ep_rank) {
        names.push_back(model_shard_file_name(c));
        if (has_optimizer_ && optimizer_scalars_.distributed)
          for (c.dp_rank = 0; c.dp_rank < c.dp_size; ++c.dp_rank)
            if (c.dp_rank % c.ep_size == c.ep_rank) names.push_back(distributed_optimizer_file_name(c));  // EP's DP ranks
      }
  return names;
}

void CheckpointReader::read_common(const fs::path& common) {
  common_ = h5_open_file_read(common.string());
  hid_t root = common_.get();
  int64_t version = h5_attr_int(root, "format_version");
  TESSERA_CHECK(version == kShardFormatVersion, common.string(), ": format_version ", version,
                " is not supported (this build reads ", kShardFormatVersion, ")");
  iteration_ = h5_attr_int(root, "iteration");
  saved_layout_.tp_size = static_cast<int>(h5_attr_int(root, "tp_size"));
  saved_layout_.pp_size = static_cast<int>(h5_attr_int(root, "pp_size"));
  saved_layout_.ep_size = static_cast<int>(h5_attr_int(root, "ep_size"));
  saved_layout_.dp_size = static_cast<int>(h5_attr_int(root, "dp_size"));
  saved_layout_.world_size = static_cast<int>(h5_attr_int(root, "world_size"));

  H5Id progress = h5_open_group(root, "progress");
  progress_.iteration = h5_attr_int(progress.get(), "iteration");
  progress_.consumed_samples = h5_attr_int(progress.get(), "consumed_samples");
  progress_.eval_consumed_samples = h5_attr_int(progress.get(), "eval_consumed_samples");
  progress_.skipped_iterations = h5_attr_int(progress.get(), "skipped_iterations");
  progress_.nan_iterations = h5_attr_int(progress.get(), "nan_iterations");
  H5Id rng = h5_open_group(root, "rng");
  progress_.seed = h5_attr_int(rng.get(), "seed");

  H5Id optimizer = h5_open_group(root, "optimizer");
  has_optimizer_ = h5_attr_int(optimizer.get(), "saved") != 0;
  if (has_optimizer_) {
    optimizer_scalars_.step = h5_attr_int(optimizer.get(), "step");
    optimizer_scalars_.loss_scale = h5_attr_double(optimizer.get(), "loss_scale");
    optimizer_scalars_.growth_tracker = h5_attr_int(optimizer.get(), "growth_tracker");
    optimizer_scalars_.hysteresis = h5_attr_int(optimizer.get(), "hysteresis");
    optimizer_scalars_.distributed = h5_attr_int(optimizer.get(), "distributed") != 0;
  }
  if (h5_has_attr(progress.get(), "fields_checksum")) {
    uint64_t stored = static_cast<uint64_t>(h5_attr_int(progress.get(), "fields_checksum"));
    uint64_t computed = common_fields_checksum(iteration_, saved_layout_, progress_, has_optimizer_, optimizer_scalars_);
    TESSERA_CHECK(stored == computed, common.string(), " is corrupt: its iteration, progress, seed, optimizer or "
                  "layout fields do not match their checksum (iteration reads as ", progress_.iteration, ")");
  }
}

CheckpointReader::~CheckpointReader() = default;

void CheckpointReader::index_file(size_t file_index, const std::string& file_name) {
  files_.push_back(std::make_unique<H5Id>(h5_open_file_read((folder_ / file_name).string())));
  file_names_.push_back(file_name);
  hid_t file = files_.back()->get();
  descriptors_.push_back(h5_file_descriptor(file));
  if (h5_exists(file, "model")) {
    H5Id group = h5_open_group(file, "model");
    index_group(file_index, group.get(), "model", "param");
  }
  if (h5_exists(file, "optimizer")) {
    H5Id group = h5_open_group(file, "optimizer");
    for (const std::string& kind : h5_list(group.get())) {
      H5Id kind_group = h5_open_group(group.get(), kind);
      index_group(file_index, kind_group.get(), "optimizer/" + kind, kind);
    }
  }
}

void CheckpointReader::index_group(size_t file_index, hid_t group, const std::string& path, const std::string& kind) {
  const std::vector<H5Link> links = h5_list_links(group);
  const std::optional<std::vector<StoredPiece>> indexed = read_piece_index(group, links);  // piece_index.h
  for (size_t i = 0; i < links.size(); ++i) {
    const std::string& name = links[i].name;
    Piece p;
    p.file = file_index;
    p.path = path + "/" + name;
    p.indexed = indexed.has_value();
    StoredPiece s;
    if (indexed) {
      s = (*indexed)[i];
    } else {
      H5Id dataset(TESSERA_H5_CHECK(H5Dopen2(group, name.c_str(), H5P_DEFAULT), file_names_[file_index], ": ", path,
                                    "/", name));
      s = describe_stored_piece(dataset.get());
    }
    check_stored_layout((folder_ / file_names_[file_index]).string() + ": " + p.path, s.global_shape, s.local_shape,
                        s.split_axis, s.split_offset, s.flat_offset, s.sliced ? s.count : 0);
    p.count = s.sliced ? s.count : shape_numel(s.local_shape);  // local_shape checked above
    TESSERA_CHECK(s.stored_count == p.count, file_names_[file_index], ": ", p.path, " holds ", s.stored_count,
                  " elements, its count says ", p.count);
    p.dtype = s.dtype;
    p.global_shape = std::move(s.global_shape);
    p.local_shape = std::move(s.local_shape);
    p.split_axis = static_cast<int>(s.split_axis);
    p.split_offset = s.split_offset;
    p.flat_offset = s.flat_offset;
    p.data_offset = s.data_offset;
    p.checksum8 = s.checksum8;
    pieces_[{kind, name}].push_back(std::move(p));
  }
}

bool CheckpointReader::has(const std::string& kind, const std::string& name) const {
  return pieces_.count({kind, name}) > 0;
}

std::map<std::string, double> CheckpointReader::scheduler() const {
  std::map<std::string, double> out;
  H5Id group = h5_open_group(common_.get(), "scheduler");
  for (const char* key : {"lr", "min_lr", "warmup_init", "warmup_iters", "decay_iters", "wsd_decay_iters"})
    if (h5_has_attr(group.get(), key)) out[key] = h5_attr_double(group.get(), key);
  return out;
}

std::map<std::string, std::string> CheckpointReader::scheduler_names() const {
  std::map<std::string, std::string> out;
  H5Id group = h5_open_group(common_.get(), "scheduler");
  for (const char* key : {"lr_decay_style", "lr_wsd_decay_style"})
    if (h5_has_attr(group.get(), key)) out[key] = h5_attr_string(group.get(), key);
  return out;
}

std::string CheckpointReader::config_toml() const { return h5_read_string(common_.get(), "config_toml"); }

std::map<std::string, int64_t> CheckpointReader::model_info() const {
  std::map<std::string, int64_t> out;
  if (!h5_exists(common_.get(), "model_info")) return out;
  H5Id group = h5_open_group(common_.get(), "model_info");
  for (const char* key :
       {"vocab_size", "padded_vocab_size", "num_layers", "hidden_size", "num_attention_heads", "seq_length"})
    if (h5_has_attr(group.get(), key)) out[key] = h5_attr_int(group.get(), key);
  return out;
}

namespace {
// Reads elements [flat_offset, +count) of target's local shard into `out` (any device): straight
// into host memory, through a host copy for a GPU.
void store_slices(const CheckpointReader& reader, const std::string& kind, const std::string& name,
                  const TensorShard& target, int64_t flat_offset, int64_t count, const Tensor& out) {
  if (out.device().is_cpu()) return reader.read_slices(kind, name, target, flat_offset, count, out.data(), out.dtype());
  Buffer staged(out.nbytes());
  reader.read_slices(kind, name, target, flat_offset, count, staged.data(), out.dtype());
  copy_synchronous(staged.as_tensor(out.dtype(), out.shape()), out);  // done before the staging buffer is freed
}
}  // namespace

void CheckpointReader::read_model(const TensorShard& target, const std::string& source_name) const {
  const std::string& name = source_name.empty() ? target.name : source_name;
  std::string kind = has("main_param", name) ? "main_param" : "param";
  store_slices(*this, kind, name, target, 0, target.local.numel(), target.local);
}

void CheckpointReader::read_optimizer(const std::string& kind, const OptimizerSlice& slice, const Tensor& out,
                                      const std::string& source_name) const {
  const std::string& name = source_name.empty() ? slice.param.name : source_name;
  expect_tensor(out, DType::f32, {slice.count}, "optimizer state");
  std::string source_kind = kind == "main_param" && !has(kind, name) ? "param" : kind;
  TESSERA_CHECK(slice.flat_offset >= 0 && slice.flat_offset + slice.count <= slice.param.local.numel(),
                "optimizer slice of ", name, " exceeds its shard");
  store_slices(*this, source_kind, name, slice.param, slice.flat_offset, slice.count, out);
}

}  // namespace tessera::ckpt
