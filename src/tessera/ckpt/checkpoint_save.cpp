// Writes a checkpoint: shard files, distributed-optimizer slices and common.h5 into a temporary
// folder, then the barrier, the rename, the tracker and pruning (see checkpoint_save.h).
#include "tessera/ckpt/checkpoint_save.h"

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/collective_errors.h"
#include "tessera/ckpt/common_checksum.h"
#include "tessera/ckpt/h5_file.h"
#include "tessera/ckpt/piece_index.h"
#include "tessera/ckpt/shard_header.h"
#include "tessera/core/buffer.h"
#include "tessera/core/logging.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;

namespace {

void write_header(hid_t file, const SaveRequest& r) {
  write_shard_header(file, r.iteration, r.coords, r.metadata.params_dtype, r.optimizer && r.optimizer->distributed);
}

void set_layout_attrs(hid_t dataset, const TensorShard& shard) {
  Shape global = shard.global_shape.empty() && shard.split_axis < 0 ? shard.local.shape() : shard.global_shape;
  h5_set_attr(dataset, "global_shape", std::vector<int64_t>(global.begin(), global.end()));
  h5_set_attr(dataset, "split_axis", int64_t{shard.split_axis});
  h5_set_attr(dataset, "split_offset", shard.split_offset);
  h5_set_attr(dataset, "local_shape", std::vector<int64_t>(shard.local.shape().begin(), shard.local.shape().end()));
}

void check_shard(const TensorShard& s) {
  TESSERA_CHECK(!s.name.empty() && s.name.find('/') == std::string::npos, "checkpoint tensor name '", s.name,
                "' must be non-empty and without '/'");
  if (s.split_axis < 0) return;
  TESSERA_CHECK(s.split_axis < s.local.ndim() && s.global_shape.size() == s.local.shape().size(), "tensor ", s.name,
                ": split_axis ", s.split_axis, " and global shape ", shape_string(s.global_shape),
                " do not fit the local shape ", shape_string(s.local.shape()));
  TESSERA_CHECK(s.split_offset >= 0 && s.split_offset + s.local.dim(s.split_axis) <= s.global_shape[s.split_axis],
                "tensor ", s.name, ": slice at ", s.split_offset, " of ", s.local.dim(s.split_axis),
                " exceeds global dim ", s.global_shape[s.split_axis]);
}

void write_model(hid_t file, const SaveRequest& r) {
  H5Id group = h5_create_group(file, "model");
  for (const TensorShard& shard : r.model) {
    check_shard(shard);
    h5_write_tensor(group.get(), shard.name, shard.local);
    H5Id dataset(TESSERA_H5_CHECK(H5Dopen2(group.get(), shard.name.c_str(), H5P_DEFAULT), "dataset ", shard.name));
    set_layout_attrs(dataset.get(), shard);
  }
  write_piece_index(group.get());
}

void write_optimizer(hid_t file, const OptimizerState& o) {
  H5Id group = h5_create_group(file, "optimizer");
  h5_set_attr(group.get(), "step", o.step);
  h5_set_attr(group.get(), "loss_scale", o.loss_scale);
  h5_set_attr(group.get(), "growth_tracker", o.growth_tracker);
  h5_set_attr(group.get(), "hysteresis", o.hysteresis);
  h5_set_attr(group.get(), "distributed", int64_t{o.distributed ? 1 : 0});
  bool main_params = !o.slices.empty() && o.slices.front().main_param.defined() &&
                     o.slices.front().main_param.numel() > 0;
  std::vector<std::pair<std::string, Tensor OptimizerSlice::*>> kinds = {{"exp_avg", &OptimizerSlice::exp_avg},
                                                                          {"exp_avg_sq", &OptimizerSlice::exp_avg_sq}};
  if (main_params) kinds.push_back({"main_param", &OptimizerSlice::main_param});
  for (const auto& [kind, member] : kinds) {
    H5Id kind_group = h5_create_group(group.get(), kind);
    for (const OptimizerSlice& slice : o.slices) {
      const Tensor& values = slice.*member;
      TESSERA_CHECK(values.dtype() == DType::f32 && values.numel() == slice.count, "optimizer ", kind, " of ",
                    slice.param.name, " must be f32 [", slice.count, "], got ", values.describe());
      int64_t local_numel = slice.param.local.numel();
      TESSERA_CHECK(slice.flat_offset >= 0 && slice.flat_offset + slice.count <= local_numel, "optimizer slice of ",
                    slice.param.name, " [", slice.flat_offset, ", +", slice.count, ") exceeds its ", local_numel,
                    " local elements");
      // A whole-shard slice keeps the parameter's shape (readable as is); a partial one is 1-D.
      Tensor stored = slice.count == local_numel ? values.view(slice.param.local.shape()) : values.flat();
      h5_write_tensor(kind_group.get(), slice.param.name, stored);
      H5Id dataset(TESSERA_H5_CHECK(H5Dopen2(kind_group.get(), slice.param.name.c_str(), H5P_DEFAULT), "dataset ",
                                    slice.param.name));
      set_layout_attrs(dataset.get(), slice.param);
      h5_set_attr(dataset.get(), "flat_offset", slice.flat_offset);
      h5_set_attr(dataset.get(), "count", slice.count);
    }
    write_piece_index(kind_group.get());
  }
}

void write_common(hid_t file, const SaveRequest& r, const std::vector<int64_t>& rank_table) {
  H5Id progress = h5_create_group(file, "progress");
  h5_set_attr(progress.get(), "iteration", r.progress.iteration);
  h5_set_attr(progress.get(), "consumed_samples", r.progress.consumed_samples);
  h5_set_attr(progress.get(), "eval_consumed_samples", r.progress.eval_consumed_samples);
  h5_set_attr(progress.get(), "skipped_iterations", r.progress.skipped_iterations);
  h5_set_attr(progress.get(), "nan_iterations", r.progress.nan_iterations);

  H5Id rng = h5_create_group(file, "rng");
  h5_set_attr(rng.get(), "generator", std::string("philox4x32-10, counter-based: Philox(seed, stream, index)"));
  h5_set_attr(rng.get(), "seed", r.progress.seed);
  h5_set_attr(rng.get(), "streams",
              std::string("init: stream_id(parameter name), index = global element; dropout: seed with stream "
                          "mix_stream(iteration, first global sample of the micro-batch); data order: seed and "
                          "consumed_samples"));
  int64_t world = r.coords.world_size;
  Buffer table_buffer(rank_table.size() * sizeof(int64_t));
  std::copy(rank_table.begin(), rank_table.end(), static_cast<int64_t*>(table_buffer.data()));
  h5_write_tensor(rng.get(), "ranks", table_buffer.as_tensor(DType::i64, {world, 6}));
  H5Id ranks(TESSERA_H5_CHECK(H5Dopen2(rng.get(), "ranks", H5P_DEFAULT), "dataset rng/ranks"));
  h5_set_attr(ranks.get(), "columns", std::string("world_rank, tp_rank, pp_rank, dp_rank, ep_rank, seed"));

  H5Id scheduler = h5_create_group(file, "scheduler");
  h5_set_attr(scheduler.get(), "num_steps", r.progress.iteration);
  for (const auto& [key, value] : r.metadata.scheduler) h5_set_attr(scheduler.get(), key, value);
  for (const auto& [key, value] : r.metadata.scheduler_names) h5_set_attr(scheduler.get(), key, value);

  H5Id model = h5_create_group(file, "model_info");
  for (const auto& [key, value] : r.metadata.model) h5_set_attr(model.get(), key, value);

  H5Id optimizer = h5_create_group(file, "optimizer");
  h5_set_attr(optimizer.get(), "saved", int64_t{r.optimizer ? 1 : 0});
  if (r.optimizer) {
    h5_set_attr(optimizer.get(), "step", r.optimizer->step);
    h5_set_attr(optimizer.get(), "loss_scale", r.optimizer->loss_scale);
    h5_set_attr(optimizer.get(), "growth_tracker", r.optimizer->growth_tracker);
    h5_set_attr(optimizer.get(), "hysteresis", r.optimizer->hysteresis);
    h5_set_attr(optimizer.get(), "distributed", int64_t{r.optimizer->distributed ? 1 : 0});
  }
  h5_write_string(file, "config_toml", r.metadata.config_toml);
  const OptimizerState none;
  uint64_t checksum = common_fields_checksum(r.iteration, r.coords, r.progress, r.optimizer != nullptr,
                                             r.optimizer ? *r.optimizer : none);
  h5_set_attr(progress.get(), "fields_checksum", static_cast<int64_t>(checksum));
}

int64_t broadcast_nonce(Communicator& world) {
  Buffer buffer(sizeof(int64_t));
  auto* value = static_cast<int64_t*>(buffer.data());
  if (world.rank() == 0) {
    std::random_device device;
    uint64_t mixed = (uint64_t{device()} << 32) ^ device() ^
                     static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    *value = static_cast<int64_t>(mixed & 0x7fffffffffffffffull);
  }
  Tensor t = buffer.as_tensor(DType::i64, {1});
  world.broadcast(t, 0);
  return *value;
}

std::string hex(int64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "%012llx", static_cast<unsigned long long>(value) & 0xffffffffffffull);
  return buffer;
}

void pause_for_tests() {
  const char* pause = std::getenv("TESSERA_TEST_PAUSE_IN_SAVE_MS");
  if (pause && *pause) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(pause)));
}

// Rank 0, after every rank has written: make the folder visible, then the tracker, then prune.
void commit(const SaveRequest& r, const fs::path& tmp, const std::string& nonce) {
  fs::path final_dir = r.save_dir / iteration_dir_name(r.iteration);
  fs::path old_dir = r.save_dir / (iteration_dir_name(r.iteration) + ".old-" + nonce);
  std::error_code ec;
  fsync_directory(tmp);
  bool replaced = fs::exists(final_dir);
  if (replaced) {  // saving the same iteration again (e.g. right after a resume)
    fs::rename(final_dir, old_dir, ec);
    TESSERA_CHECK(!ec, "moving the existing ", final_dir.string(), " aside: ", ec.message());
  }
  fs::rename(tmp, final_dir, ec);
  TESSERA_CHECK(!ec, "renaming ", tmp.string(), " to ", final_dir.string(), ": ", ec.message());
  fsync_directory(r.save_dir);
  write_tracker_atomically(r.save_dir, r.iteration);
  if (replaced) fs::remove_all(old_dir, ec);
  remove_stale_temporaries(r.save_dir, final_dir.filename().string());
  for (int64_t removed : prune_checkpoints(r.save_dir, r.keep_last_n, r.iteration))
    log::info("removed old checkpoint ", (r.save_dir / iteration_dir_name(removed)).string(), " (keep_last_n = ",
              r.keep_last_n, ")");
}

}  // namespace

PreparedSave prepare_save(const SaveRequest& r, Communicator& world) {
  const ShardCoordinates& c = r.coords;
  TESSERA_CHECK(!r.save_dir.empty(), "save_checkpoint needs checkpoint.save");
  PreparedSave prepared;
  prepared.start = std::chrono::steady_clock::now();
  prepared.nonce = hex(broadcast_nonce(world));
  prepared.tmp = r.save_dir / (iteration_dir_name(r.iteration) + ".tmp-" + prepared.nonce);
  std::error_code ec;
  fs::create_directories(prepared.tmp, ec);
  TESSERA_CHECK(fs::is_directory(prepared.tmp), "cannot create checkpoint folder ", prepared.tmp.string(), ": ",
                ec.message());
  // Every rank's (coordinates, seed): the RNG table of common.h5.
  Buffer mine(6 * sizeof(int64_t));
  prepared.rank_table = std::make_shared<Buffer>(static_cast<size_t>(c.world_size) * 6 * sizeof(int64_t));
  auto* row = static_cast<int64_t*>(mine.data());
  int64_t values[6] = {c.world_rank, c.tp_rank, c.pp_rank, c.dp_rank, c.ep_rank, r.progress.seed};
  std::copy(values, values + 6, row);
  world.all_gather(mine.as_tensor(DType::i64, {6}),
                   prepared.rank_table->as_tensor(DType::i64, {int64_t{c.world_size} * 6}));
  return prepared;
}

SaveResult finish_save(const SaveRequest& r, const PreparedSave& prepared, Communicator& world,
                       std::exception_ptr local_failure) {
  // A rank that could not write (disk full, quota, I/O error) ends every rank with its message, and
  // the temporary folder goes: the previous checkpoint and the tracker stay as they were.
  try {
    run_on_all_ranks_or_fail_together(world, [&] {
      if (local_failure) std::rethrow_exception(local_failure);
    });
  } catch (...) {
    std::error_code ec;
    if (world.rank() == 0) fs::remove_all(prepared.tmp, ec);
    throw;
  }
  pause_for_tests();
  world.barrier();  // every rank's files are complete
  if (world.rank() == 0) commit(r, prepared.tmp, prepared.nonce);
  world.barrier();  // the checkpoint is visible to every rank when this returns
  SaveResult result;
  result.folder = r.save_dir / iteration_dir_name(r.iteration);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - prepared.start).count();
  return result;
}

SaveResult save_checkpoint(const SaveRequest& r, Communicator& world) {
  PreparedSave prepared = prepare_save(r, world);
  std::exception_ptr failure;
  try {
    write_save_files(r, prepared);
  } catch (...) {
    failure = std::current_exception();
  }
  return finish_save(r, prepared, world, failure);
}

void write_save_files(const SaveRequest& r, const PreparedSave& prepared) {
  const fs::path& tmp = prepared.tmp;
  const Buffer& all = *prepared.rank_table;
  const ShardCoordinates& c = r.coords;
  const bool distributed = r.optimizer && r.optimizer->distributed;
  // One model file per (TP, PP, EP) shard: the first DP rank of each EP rank (dp_rank = ep_rank + EP x
  // expert-data rank in Megatron's grid, so these are the DP ranks below EP).
  if (c.dp_rank < c.ep_size) {
    fs::path path = tmp / model_shard_file_name(c);
    H5Id file = h5_create_file(path.string());
    write_header(file.get(), r);
    write_model(file.get(), r);
    if (r.optimizer && !distributed) write_optimizer(file.get(), *r.optimizer);
    h5_close_and_sync(file, path.string());
  }
  if (distributed) {
    fs::path path = tmp / distributed_optimizer_file_name(c);
    H5Id file = h5_create_file(path.string());
    write_header(file.get(), r);
    write_optimizer(file.get(), *r.optimizer);
    h5_close_and_sync(file, path.string());
  }
  if (c.world_rank == 0) {
    fs::path path = tmp / kCommonFile;
    H5Id file = h5_create_file(path.string());
    write_header(file.get(), r);
    const auto* table = static_cast<const int64_t*>(all.data());
    write_common(file.get(), r, std::vector<int64_t>(table, table + int64_t{c.world_size} * 6));
    h5_close_and_sync(file, path.string());
  }
}

}  // namespace tessera::ckpt
