#include "tessera/convert/checkpoint_writer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/common_checksum.h"
#include "tessera/ckpt/h5_file.h"
#include "tessera/ckpt/piece_index.h"
#include "tessera/ckpt/shard_header.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera::convert {

namespace fs = std::filesystem;
using ckpt::H5Id;

struct CheckpointWriter::File {
  bool mine = true;  // written by this rank (writer_ranks.h)
  std::string path;
  ckpt::ShardCoordinates coords;
  H5Id file;
  std::map<std::string, H5Id> groups;  // "model", "optimizer", "optimizer/exp_avg", ...
  hid_t group(const std::string& name) {
    auto it = groups.find(name);
    if (it != groups.end()) return it->second.get();
    const auto slash = name.rfind('/');
    hid_t parent = slash == std::string::npos ? file.get() : group(name.substr(0, slash));
    H5Id created = ckpt::h5_create_group(parent, slash == std::string::npos ? name : name.substr(slash + 1));
    return groups.emplace(name, std::move(created)).first->second.get();
  }
};

DType parse_params_dtype(const std::string& text, const std::string& option) {
  if (text == "fp32" || text == "f32") return DType::f32;
  if (text == "bf16") return DType::bf16;
  if (text == "fp16" || text == "f16") return DType::f16;
  TESSERA_CONFIG_FAIL(option, " '", text, "' is not allowed; allowed: fp32, bf16, fp16");
}

namespace {

void write_header(hid_t file, int64_t iteration, const ckpt::ShardCoordinates& c, DType params_dtype,
                  bool distributed) {
  ckpt::write_shard_header(file, iteration, c, std::string(dtype_name(params_dtype)), distributed);
}

std::string nonce() {
  std::random_device device;
  uint64_t mixed = (uint64_t{device()} << 32) ^ device() ^
                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "%012llx", static_cast<unsigned long long>(mixed & 0xffffffffffffull));
  return buffer;
}

// Local piece [offset, offset + len) along axis of a row-major global tensor.
void slice_along(const float* global, const Shape& shape, int axis, int64_t offset, int64_t len, float* out) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i < axis) outer *= shape[i];
    if (i > axis) inner *= shape[i];
  }
  const int64_t g = shape[axis];
  for (int64_t o = 0; o < outer; ++o) std::copy_n(global + (o * g + offset) * inner, len * inner, out + o * len * inner);
}

}  // namespace

CheckpointWriter::CheckpointWriter(const fs::path& dir, int64_t iteration, const TargetLayout& layout,
                                   DType params_dtype, bool with_optimizer, const WriterRanks& ranks)
    : dir_(dir),
      iteration_(iteration),
      layout_(layout),
      params_dtype_(params_dtype),
      with_optimizer_(with_optimizer),
      ranks_(ranks) {
  ckpt::h5_quiet();
  TESSERA_CHECK(layout.tp >= 1 && layout.pp >= 1 && layout.dp >= 1 && layout.ep >= 1, "target layout TP=", layout.tp,
                " PP=", layout.pp, " DP=", layout.dp, " EP=", layout.ep);
  if (layout_.dp == 1) layout_.distributed_optimizer = false;
  if (layout.ep > 1) {
    if (layout.num_experts <= 0 || layout.num_experts % layout.ep != 0)
      TESSERA_CONFIG_FAIL("--expert-model-parallel-size ", layout.ep, " must divide model.num_experts = ",
                          layout.num_experts, " (expert parallelism needs a MoE model)");
    if (layout.dp % layout.ep != 0)
      TESSERA_CONFIG_FAIL("--expert-model-parallel-size ", layout.ep, " must divide the data-parallel size ", layout.dp,
                          " (--data-parallel-size)");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) TESSERA_CONFIG_FAIL("cannot create output folder ", dir.string(), ": ", ec.message());
  const fs::path final_dir = dir / ckpt::iteration_dir_name(iteration);
  if (fs::exists(final_dir))
    TESSERA_CONFIG_FAIL("output ", final_dir.string(), " already exists; choose another --output or remove it");
  // Rank 0 names and creates the temporary folder; the other ranks receive its name after that.
  std::string tmp_name = ckpt::iteration_dir_name(iteration) + ".tmp-" + nonce();
  if (ranks_.leader()) {
    fs::create_directories(dir / tmp_name, ec);
    TESSERA_CHECK(fs::is_directory(dir / tmp_name), "cannot create ", (dir / tmp_name).string(), ": ", ec.message());
  }
  tmp_ = dir / ranks_.from_leader(tmp_name);

  const int world = layout_.tp * layout_.pp * layout_.dp;
  for (int pp = 0; pp < layout_.pp; ++pp)
    for (int tp = 0; tp < layout_.tp; ++tp) {
      ckpt::ShardCoordinates c{tp, layout_.tp, pp, layout_.pp, 0, layout_.ep, 0, layout_.dp, 0, world};
      for (int ep = 0; ep < layout_.ep; ++ep) {  // written by the first DP rank of each EP rank: dp = ep
        c.ep_rank = ep;
        c.dp_rank = ep;
        c.world_rank = tp + layout_.tp * (ep + layout_.dp * pp);
        auto f = std::make_unique<File>();
        f->mine = ranks_.owns(model_files_.size());
        f->path = (tmp_ / ckpt::model_shard_file_name(c)).string();
        f->coords = c;
        if (f->mine) {
          f->file = ckpt::h5_create_file(f->path);
          write_header(f->file.get(), iteration, c, params_dtype, layout_.distributed_optimizer && with_optimizer);
        }
        model_files_.push_back(std::move(f));
      }
      c.ep_rank = 0;
      if (!(with_optimizer && layout_.distributed_optimizer)) continue;
      for (int dp = 0; dp < layout_.dp; ++dp) {
        c.dp_rank = dp;
        c.ep_rank = dp % layout_.ep;  // Megatron's grid: dp = ep_rank + EP x expert-data rank
        c.world_rank = tp + layout_.tp * (dp + layout_.dp * pp);
        optimizer_files_.push_back(std::make_unique<File>());  // indexed after every model file (below)
        File& o = *optimizer_files_.back();
        o.path = (tmp_ / ckpt::distributed_optimizer_file_name(c)).string();
        o.coords = c;
      }
    }
  for (size_t i = 0; i < optimizer_files_.size(); ++i) {
    File& o = *optimizer_files_[i];
    o.mine = ranks_.owns(model_files_.size() + i);
    if (!o.mine) continue;
    o.file = ckpt::h5_create_file(o.path);
    write_header(o.file.get(), iteration, o.coords, params_dtype, true);
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  model_files_.clear();
  optimizer_files_.clear();
  std::error_code ec;
  if (ranks_.leader()) fs::remove_all(tmp_, ec);  // never leave a half-written checkpoint behind
}

std::vector<int> CheckpointWriter::ep_holders(const models::CheckpointTensor& t) const {
  if (t.expert < 0 || layout_.ep == 1) {
    std::vector<int> all(static_cast<size_t>(layout_.ep));
    for (int e = 0; e < layout_.ep; ++e) all[static_cast<size_t>(e)] = e;
    return all;
  }
  return {static_cast<int>(t.expert / (layout_.num_experts / layout_.ep))};
}

std::vector<int> CheckpointWriter::optimizer_holders(const models::CheckpointTensor& t) const {
  std::vector<int> dps;
  if (!(with_optimizer_ && layout_.distributed_optimizer)) return dps;
  const std::vector<int> eps = ep_holders(t);
  for (int dp = 0; dp < layout_.dp; ++dp)
    if (std::find(eps.begin(), eps.end(), dp % layout_.ep) != eps.end()) dps.push_back(dp);
  return dps;
}

bool CheckpointWriter::wants(const models::CheckpointTensor& t) const {
  for (int stage : t.stages)
    for (int tp = 0; tp < layout_.tp; ++tp) {
      for (int ep : ep_holders(t))
        if (model_files_.at(static_cast<size_t>((stage * layout_.tp + tp) * layout_.ep + ep))->mine) return true;
      for (int dp : optimizer_holders(t))
        if (optimizer_files_.at(static_cast<size_t>((stage * layout_.tp + tp) * layout_.dp + dp))->mine) return true;
    }
  return false;
}

CheckpointWriter::File& CheckpointWriter::model_file(int tp, int pp, int ep) {
  return *model_files_.at(static_cast<size_t>((pp * layout_.tp + tp) * layout_.ep + ep));
}

CheckpointWriter::File& CheckpointWriter::optimizer_file(int tp, int pp, int dp) {
  return *optimizer_files_.at(static_cast<size_t>((pp * layout_.tp + tp) * layout_.dp + dp));
}

void CheckpointWriter::write_piece(File& file, const std::string& group, const models::CheckpointTensor& t,
                                   int tp_rank, const float* global, DType dtype, int64_t flat_offset,
                                   int64_t count) {
  if (!file.mine) return;
  Shape local = t.global_shape;
  int64_t split_offset = 0;
  const float* values = global;
  if (t.split_axis >= 0) {
    TESSERA_CHECK(local[t.split_axis] % layout_.tp == 0, "tensor ", t.name, " dim ", local[t.split_axis],
                  " does not split over TP=", layout_.tp);
    local[t.split_axis] /= layout_.tp;
    split_offset = tp_rank * local[t.split_axis];
    piece_.resize(static_cast<size_t>(shape_numel(local)));
    slice_along(global, t.global_shape, t.split_axis, split_offset, local[t.split_axis], piece_.data());
    values = piece_.data();
  }
  const int64_t local_numel = shape_numel(local);
  const bool partial = count != local_numel;
  values += flat_offset;
  Shape stored = partial ? Shape{count} : local;
  const void* data = values;
  if (dtype != DType::f32) {
    half_.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      half_[i] = dtype == DType::bf16 ? float_to_bf16(values[i]).bits : float_to_f16(values[i]).bits;
    data = half_.data();
  }
  hid_t parent = file.group(group);
  const std::string where = file.path + " " + group + "/" + t.name;
  try {
    ckpt::h5_write_tensor(parent, t.name, Tensor(const_cast<void*>(data), dtype, stored));
    H5Id dataset(TESSERA_H5_CHECK(H5Dopen2(parent, t.name.c_str(), H5P_DEFAULT), where));
    ckpt::h5_set_attr(dataset.get(), "global_shape", std::vector<int64_t>(t.global_shape.begin(), t.global_shape.end()));
    ckpt::h5_set_attr(dataset.get(), "split_axis", int64_t{t.split_axis});
    ckpt::h5_set_attr(dataset.get(), "split_offset", split_offset);
    ckpt::h5_set_attr(dataset.get(), "local_shape", std::vector<int64_t>(local.begin(), local.end()));
    if (group != "model") {
      ckpt::h5_set_attr(dataset.get(), "flat_offset", flat_offset);
      ckpt::h5_set_attr(dataset.get(), "count", count);
    }
  } catch (const Error& e) {
    TESSERA_FAIL("writing ", where, ": ", e.message());
  }
}

void CheckpointWriter::write_param(const models::CheckpointTensor& t, const float* global) {
  for (int stage : t.stages)
    for (int tp = 0; tp < layout_.tp; ++tp) {
      const int64_t n = shape_numel(t.global_shape) / (t.split_axis >= 0 ? layout_.tp : 1);
      for (int ep : ep_holders(t)) write_piece(model_file(tp, stage, ep), "model", t, tp, global, params_dtype_, 0, n);
    }
}

void CheckpointWriter::write_optimizer(const std::string& kind, const models::CheckpointTensor& t,
                                       const float* global) {
  TESSERA_CHECK(with_optimizer_, "write_optimizer on a writer created without optimizer state");
  const int64_t n = shape_numel(t.global_shape) / (t.split_axis >= 0 ? layout_.tp : 1);
  for (int stage : t.stages)
    for (int tp = 0; tp < layout_.tp; ++tp) {
      if (!layout_.distributed_optimizer) {
        for (int ep : ep_holders(t))
          write_piece(model_file(tp, stage, ep), "optimizer/" + kind, t, tp, global, DType::f32, 0, n);
        continue;
      }
      // Any contiguous cover of each shard is valid (readers concatenate the slices): DP rank d
      // gets [d n / dp, (d + 1) n / dp) of the shard.
      // An expert's state is sharded over its EP rank's DP ranks (its expert-data group) only.
      const std::vector<int> holders = optimizer_holders(t);
      const auto parts = static_cast<int64_t>(holders.size());
      for (int64_t k = 0; k < parts; ++k) {
        const int64_t begin = n * k / parts, end = n * (k + 1) / parts;
        if (end > begin)
          write_piece(optimizer_file(tp, stage, holders[static_cast<size_t>(k)]), "optimizer/" + kind, t, tp, global,
                      DType::f32, begin, end - begin);
      }
    }
}

fs::path CheckpointWriter::commit(const CommonInfo& info) {
  using ckpt::h5_set_attr;
  const auto& o = info.optimizer;
  auto optimizer_attrs = [&](hid_t group) {
    h5_set_attr(group, "step", o.step);
    h5_set_attr(group, "loss_scale", o.loss_scale);
    h5_set_attr(group, "growth_tracker", o.growth_tracker);
    h5_set_attr(group, "hysteresis", o.hysteresis);
    h5_set_attr(group, "distributed", int64_t{layout_.distributed_optimizer ? 1 : 0});
  };
  if (with_optimizer_) {
    for (auto& f : model_files_)
      if (f->mine && !layout_.distributed_optimizer) optimizer_attrs(f->group("optimizer"));
    for (auto& f : optimizer_files_)
      if (f->mine) optimizer_attrs(f->group("optimizer"));
  }
  for (auto* files : {&model_files_, &optimizer_files_})
    for (auto& f : *files) {
      if (!f->mine) continue;
      for (const auto& [name, group] : f->groups)  // the groups of datasets, as the trainer's save
        if (name == "model" || name.rfind("optimizer/", 0) == 0) ckpt::write_piece_index(group.get());
      f->groups.clear();
      ckpt::h5_close_and_sync(f->file, f->path);
    }
  // Every rank's files are complete before rank 0 makes the checkpoint visible; the other ranks
  // return once it is.
  const fs::path final_dir = dir_ / ckpt::iteration_dir_name(iteration_);
  ranks_.barrier();
  if (!ranks_.leader()) {
    ranks_.barrier();
    committed_ = true;
    return final_dir;
  }

  const fs::path common_path = tmp_ / ckpt::kCommonFile;
  H5Id file = ckpt::h5_create_file(common_path.string());
  const int world = layout_.tp * layout_.pp * layout_.dp;
  ckpt::ShardCoordinates c0{0, layout_.tp, 0, layout_.pp, 0, layout_.ep, 0, layout_.dp, 0, world};
  write_header(file.get(), iteration_, c0, params_dtype_, layout_.distributed_optimizer && with_optimizer_);
  const auto& p = info.progress;
  H5Id progress = ckpt::h5_create_group(file.get(), "progress");
  h5_set_attr(progress.get(), "iteration", p.iteration);
  h5_set_attr(progress.get(), "consumed_samples", p.consumed_samples);
  h5_set_attr(progress.get(), "eval_consumed_samples", p.eval_consumed_samples);
  h5_set_attr(progress.get(), "skipped_iterations", p.skipped_iterations);
  h5_set_attr(progress.get(), "nan_iterations", p.nan_iterations);
  H5Id rng = ckpt::h5_create_group(file.get(), "rng");
  h5_set_attr(rng.get(), "generator", std::string("philox4x32-10, counter-based: Philox(seed, stream, index)"));
  h5_set_attr(rng.get(), "seed", p.seed);
  std::vector<int64_t> table;  // world_rank, tp_rank, pp_rank, dp_rank, ep_rank, seed (TP fastest, then DP, PP)
  for (int r = 0; r < world; ++r)
    for (int64_t v : {int64_t{r}, int64_t{r % layout_.tp}, int64_t{r / (layout_.tp * layout_.dp)},
                      int64_t{(r / layout_.tp) % layout_.dp}, int64_t{((r / layout_.tp) % layout_.dp) % layout_.ep}, p.seed})
      table.push_back(v);
  ckpt::h5_write_tensor(rng.get(), "ranks", Tensor(table.data(), DType::i64, {world, 6}));
  H5Id scheduler = ckpt::h5_create_group(file.get(), "scheduler");
  h5_set_attr(scheduler.get(), "num_steps", p.iteration);
  for (const auto& [key, value] : info.metadata.scheduler) h5_set_attr(scheduler.get(), key, value);
  for (const auto& [key, value] : info.metadata.scheduler_names) h5_set_attr(scheduler.get(), key, value);
  H5Id model = ckpt::h5_create_group(file.get(), "model_info");
  for (const auto& [key, value] : info.metadata.model) h5_set_attr(model.get(), key, value);
  H5Id optimizer = ckpt::h5_create_group(file.get(), "optimizer");
  h5_set_attr(optimizer.get(), "saved", int64_t{with_optimizer_ ? 1 : 0});
  if (with_optimizer_) optimizer_attrs(optimizer.get());
  ckpt::h5_write_string(file.get(), "config_toml", info.metadata.config_toml);
  // The same checksum over the scalar fields as save_checkpoint writes (checked on load).
  ckpt::OptimizerState scalars = o;
  scalars.distributed = layout_.distributed_optimizer;
  h5_set_attr(progress.get(), "fields_checksum",
              static_cast<int64_t>(ckpt::common_fields_checksum(iteration_, c0, p, with_optimizer_, scalars)));
  optimizer = H5Id();
  model = H5Id();
  scheduler = H5Id();
  rng = H5Id();
  progress = H5Id();
  ckpt::h5_close_and_sync(file, common_path.string());

  ckpt::fsync_directory(tmp_);
  std::error_code ec;
  fs::rename(tmp_, final_dir, ec);
  TESSERA_CHECK(!ec, "renaming ", tmp_.string(), " to ", final_dir.string(), ": ", ec.message());
  committed_ = true;
  ckpt::fsync_directory(dir_);
  ckpt::write_tracker_atomically(dir_, iteration_);
  ranks_.barrier();
  return final_dir;
}

}  // namespace tessera::convert
