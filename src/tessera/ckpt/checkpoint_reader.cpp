// CheckpointReader: indexes a checkpoint folder's datasets by (kind, name) and reassembles global
// tensors from their shards and flat slices, then cuts the slice the reading rank holds.
#include "tessera/ckpt/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/core/buffer.h"
#include "tessera/core/half.h"
#include "tessera/runtime/device_copy.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;

namespace {

void to_double(const void* src, DType dtype, int64_t n, double* out) {
  switch (dtype) {
    case DType::f32: for (int64_t i = 0; i < n; ++i) out[i] = static_cast<const float*>(src)[i]; return;
    case DType::f64: std::memcpy(out, src, static_cast<size_t>(n) * sizeof(double)); return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(static_cast<const bf16*>(src)[i]);
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_float(static_cast<const f16*>(src)[i]);
      return;
    default: TESSERA_FAIL("checkpoint tensors must be floating point, got ", dtype_name(dtype));
  }
}

void from_double(const double* src, int64_t n, void* out, DType dtype) {
  switch (dtype) {
    case DType::f32: for (int64_t i = 0; i < n; ++i) static_cast<float*>(out)[i] = static_cast<float>(src[i]); return;
    case DType::f64: std::memcpy(out, src, static_cast<size_t>(n) * sizeof(double)); return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) static_cast<bf16*>(out)[i] = float_to_bf16(static_cast<float>(src[i]));
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) static_cast<f16*>(out)[i] = float_to_f16(static_cast<float>(src[i]));
      return;
    default: TESSERA_FAIL("cannot load a checkpoint tensor into dtype ", dtype_name(dtype));
  }
}

// Splits shape around axis: [outer, shape[axis], inner].
void around(const Shape& shape, int axis, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i < axis) outer *= shape[i];
    if (i > axis) inner *= shape[i];
  }
}

Shape attr_shape(hid_t dataset, const char* name) {
  std::vector<int64_t> v = h5_attr_ints(dataset, name);
  return Shape(v.begin(), v.end());
}

}  // namespace

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
          for (c.dp_rank = 0; c.dp_rank < c.dp_size; ++c.dp_rank) names.push_back(distributed_optimizer_file_name(c));
      }
  return names;
}

void CheckpointReader::read_common(const fs::path& common) {
  common_ = h5_open_file_read(common.string());
  hid_t root = common_.get();
  int64_t version = h5_attr_int(root, "format_version");
  TESSERA_CHECK(version == 1, common.string(), ": format_version ", version, " is not supported (this build reads 1)");
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
}

CheckpointReader::~CheckpointReader() = default;

void CheckpointReader::index_file(size_t file_index, const std::string& file_name) {
  files_.push_back(std::make_unique<H5Id>(h5_open_file_read((folder_ / file_name).string())));
  file_names_.push_back(file_name);
  hid_t file = files_.back()->get();
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
  for (const std::string& name : h5_list(group)) {
    H5Id dataset(TESSERA_H5_CHECK(H5Dopen2(group, name.c_str(), H5P_DEFAULT), file_names_[file_index], ": ", path,
                                  "/", name));
    Piece p;
    p.file = file_index;
    p.path = path + "/" + name;
    p.dtype = h5_dataset_dtype(dataset.get());
    p.global_shape = attr_shape(dataset.get(), "global_shape");
    p.local_shape = attr_shape(dataset.get(), "local_shape");
    p.split_axis = static_cast<int>(h5_attr_int(dataset.get(), "split_axis"));
    p.split_offset = h5_attr_int(dataset.get(), "split_offset");
    bool sliced = h5_has_attr(dataset.get(), "flat_offset");
    p.flat_offset = sliced ? h5_attr_int(dataset.get(), "flat_offset") : 0;
    p.count = sliced ? h5_attr_int(dataset.get(), "count") : shape_numel(p.local_shape);
    TESSERA_CHECK(shape_numel(h5_dataset_shape(dataset.get())) == p.count, file_names_[file_index], ": ", p.path,
                  " holds ", shape_numel(h5_dataset_shape(dataset.get())), " elements, its count says ", p.count);
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

std::vector<double> CheckpointReader::assemble(const std::string& kind, const std::string& name,
                                               Shape& global_shape) const {
  auto it = pieces_.find({kind, name});
  TESSERA_CHECK(it != pieces_.end(), "checkpoint ", folder_.string(), " has no ", kind, " for tensor '", name, "'");
  const std::vector<Piece>& pieces = it->second;
  global_shape = pieces.front().global_shape;
  const int axis = pieces.front().split_axis;
  std::vector<double> global(static_cast<size_t>(shape_numel(global_shape)));

  std::map<int64_t, std::vector<const Piece*>> shards;  // split_offset -> flat slices of that shard
  for (const Piece& p : pieces) {
    TESSERA_CHECK(p.global_shape == global_shape && p.split_axis == axis, "checkpoint ", folder_.string(), ": ",
                  kind, " '", name, "' has inconsistent layouts across files (global ", shape_string(p.global_shape),
                  " axis ", p.split_axis, " in ", file_names_[p.file], ")");
    shards[p.split_offset].push_back(&p);
  }
  int64_t covered_along_axis = 0;
  std::vector<char> staging;
  for (const auto& [offset, slices] : shards) {
    const Shape& local_shape = slices.front()->local_shape;
    int64_t local_numel = shape_numel(local_shape);
    std::vector<double> local(static_cast<size_t>(local_numel));
    std::set<int64_t> seen;  // replicated copies (e.g. unsplit tensors on every TP rank) are read once
    int64_t covered = 0;
    for (const Piece* p : slices) {
      if (!seen.insert(p->flat_offset).second) continue;
      TESSERA_CHECK(p->flat_offset + p->count <= local_numel, "slice of ", name, " in ", file_names_[p->file],
                    " exceeds its shard");
      staging.resize(static_cast<size_t>(p->count) * dtype_size(p->dtype));
      const std::string file = (folder_ / file_names_[p->file]).string();
      try {
        H5Id dataset(TESSERA_H5_CHECK(H5Dopen2(files_[p->file]->get(), p->path.c_str(), H5P_DEFAULT), p->path));
        h5_read_into(dataset.get(), p->dtype, staging.data());
        h5_verify_checksum(dataset.get(), staging.data(), staging.size());
      } catch (const Error& e) {
        TESSERA_FAIL("checkpoint file ", file, " cannot be read at ", p->path, " (truncated or corrupt?): ",
                     e.message());
      }
      to_double(staging.data(), p->dtype, p->count, local.data() + p->flat_offset);
      covered += p->count;
    }
    TESSERA_CHECK(covered == local_numel, "checkpoint ", folder_.string(), ": ", kind, " of '", name,
                  "' (shard at offset ", offset, ") covers ", covered, " of ", local_numel,
                  " elements; a distributed-optimizer file is missing");
    if (axis < 0) {
      TESSERA_CHECK(local_shape == global_shape, "unsplit tensor ", name, " has local shape ",
                    shape_string(local_shape), " but global ", shape_string(global_shape));
      global = std::move(local);
      covered_along_axis = axis;
      break;
    }
    int64_t outer, inner;
    around(global_shape, axis, outer, inner);
    int64_t g = global_shape[axis], l = local_shape[axis];
    TESSERA_CHECK(offset + l <= g, "shard of ", name, " at ", offset, " exceeds the global dim ", g);
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(local.data() + o * l * inner, l * inner, global.data() + (o * g + offset) * inner);
    covered_along_axis += l;
  }
  if (axis >= 0)
    TESSERA_CHECK(covered_along_axis == global_shape[axis], "checkpoint ", folder_.string(), ": the shards of ", kind,
                  " '", name, "' cover ", covered_along_axis, " of ", global_shape[axis], " along axis ", axis,
                  "; a model shard file is missing");
  return global;
}

std::vector<double> CheckpointReader::local_values(const std::string& kind, const std::string& name,
                                                   const TensorShard& target) const {
  Shape saved_shape;
  std::vector<double> global = assemble(kind, name, saved_shape);
  Shape wanted = target.split_axis < 0 ? target.local.shape() : target.global_shape;
  if (saved_shape != wanted) {
    bool rows_only = saved_shape.size() == wanted.size() && !wanted.empty() && target.vocab_axis == 0;
    for (size_t i = 1; rows_only && i < wanted.size(); ++i) rows_only = saved_shape[i] == wanted[i];
    TESSERA_CHECK(rows_only, "checkpoint tensor '", name, "' in ",
                  (folder_ / file_names_[pieces_.at({kind, name}).front().file]).string(), " has global shape ",
                  shape_string(saved_shape), " but this model needs ", shape_string(wanted), " (", target.name,
                  "); was it saved with another model configuration?");
    // A different vocabulary padding (make_vocab_size_divisible_by x TP): keep the common rows.
    int64_t row = shape_numel(wanted) / wanted[0];
    std::vector<double> resized(static_cast<size_t>(shape_numel(wanted)), 0.0);
    std::copy_n(global.data(), std::min(saved_shape[0], wanted[0]) * row, resized.data());
    global = std::move(resized);
  }
  if (target.split_axis < 0) return global;
  int64_t outer, inner;
  around(wanted, target.split_axis, outer, inner);
  int64_t g = wanted[target.split_axis], l = target.local.dim(target.split_axis), offset = target.split_offset;
  std::vector<double> local(static_cast<size_t>(target.local.numel()));
  for (int64_t o = 0; o < outer; ++o)
    std::copy_n(global.data() + (o * g + offset) * inner, l * inner, local.data() + o * l * inner);
  return local;
}

namespace {
// Converts the doubles into `out` (any device): directly on the host, through a host copy for a GPU.
void store_values(const double* values, const Tensor& out) {
  if (out.device().is_cpu()) return from_double(values, out.numel(), out.data(), out.dtype());
  Buffer staged(out.nbytes());
  from_double(values, out.numel(), staged.data(), out.dtype());
  copy_synchronous(staged.as_tensor(out.dtype(), out.shape()), out);  // done before the staging buffer is freed
}
}  // namespace

void CheckpointReader::read_model(const TensorShard& target, const std::string& source_name) const {
  const std::string& name = source_name.empty() ? target.name : source_name;
  std::string kind = has("main_param", name) ? "main_param" : "param";
  std::vector<double> values = local_values(kind, name, target);
  store_values(values.data(), target.local);
}

void CheckpointReader::read_optimizer(const std::string& kind, const OptimizerSlice& slice, const Tensor& out,
                                      const std::string& source_name) const {
  const std::string& name = source_name.empty() ? slice.param.name : source_name;
  expect_tensor(out, DType::f32, {slice.count}, "optimizer state");
  std::string source_kind = kind == "main_param" && !has(kind, name) ? "param" : kind;
  std::vector<double> values = local_values(source_kind, name, slice.param);
  TESSERA_CHECK(slice.flat_offset + slice.count <= static_cast<int64_t>(values.size()), "optimizer slice of ", name,
                " exceeds its shard");
  store_values(values.data() + slice.flat_offset, out);
}

}  // namespace tessera::ckpt
