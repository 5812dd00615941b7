// Writing a whole Tessera checkpoint from one process, tensor by tensor (bounded memory): every
// shard file of the target layout is open at once in <dir>/iter_XXXXXXX.tmp-<nonce>/; each global
// tensor is cut into its tensor-parallel pieces (and, for the distributed optimizer, into DP
// slices) as it arrives. commit() writes common.h5, closes and fsyncs every file, renames the
// folder and then replaces the tracker; an unfinished writer removes its temporary folder.
// The files are the ones save_checkpoint writes (docs/checkpoint-format.md). Several ranks can write
// one checkpoint together (writer_ranks.h): each writes only its files; callers skip the tensors
// wants() says none of this rank's files hold.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint_state.h"
#include "tessera/convert/writer_ranks.h"
#include "tessera/core/dtype.h"
#include "tessera/models/gpt_checkpoint_tensors.h"

namespace tessera::convert {

struct TargetLayout {
  int tp = 1, pp = 1, ep = 1, dp = 1;
  bool distributed_optimizer = false;  // optimizer slices in distrib_optim_* files (only when dp > 1)
  // ep > 1 (MoE): one model file per (TP, PP, EP) rank, mp_rank_TT_PPP_EEE; an expert's tensors
  // (CheckpointTensor::expert) go to the file of EP rank expert / (num_experts / ep) only.
  int64_t num_experts = 0;
};

struct CommonInfo {
  ckpt::TrainingProgress progress;
  ckpt::OptimizerState optimizer;  // scalars only (step, loss scale, ...); slices are written per tensor
  ckpt::CheckpointMetadata metadata;
};

class CheckpointWriter {
 public:
  // params_dtype: f32, bf16 or f16; with_optimizer: write_optimizer() will be called for every tensor.
  // ConfigError when <dir>/iter_XXXXXXX already exists (nothing is overwritten). With several ranks,
  // every rank of `ranks` constructs the writer and calls commit() (collectives).
  CheckpointWriter(const std::filesystem::path& dir, int64_t iteration, const TargetLayout& layout, DType params_dtype,
                   bool with_optimizer, const WriterRanks& ranks = {});
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  DType params_dtype() const { return params_dtype_; }
  // Whether this rank writes any piece of the tensor (false: write_param / write_optimizer of it
  // write nothing here, so the caller need not read it).
  bool wants(const models::CheckpointTensor& t) const;
  // The model tensor's global values (f32, numel(t.global_shape)), stored in the params dtype in the
  // model shard file of every stage in t.stages and every TP rank.
  void write_param(const models::CheckpointTensor& t, const float* global);
  // Optimizer state `kind` (exp_avg, exp_avg_sq, main_param) of the tensor, f32 global values.
  void write_optimizer(const std::string& kind, const models::CheckpointTensor& t, const float* global);
  // Writes common.h5 and makes the checkpoint visible. Returns the checkpoint folder.
  std::filesystem::path commit(const CommonInfo& common);

 private:
  struct File;
  File& model_file(int tp, int pp, int ep = 0);
  std::vector<int> ep_holders(const models::CheckpointTensor& t) const;  // EP ranks whose files hold t
  // DP ranks whose distributed-optimizer files hold slices of t (none without those files).
  std::vector<int> optimizer_holders(const models::CheckpointTensor& t) const;
  File& optimizer_file(int tp, int pp, int dp);
  void write_piece(File& file, const std::string& group, const models::CheckpointTensor& t, int tp_rank,
                   const float* global, DType dtype, int64_t flat_offset, int64_t count);

  std::filesystem::path dir_, tmp_;
  int64_t iteration_;
  TargetLayout layout_;
  DType params_dtype_;
  bool with_optimizer_;
  WriterRanks ranks_;
  bool committed_ = false;
  std::vector<std::unique_ptr<File>> model_files_, optimizer_files_;
  std::vector<float> piece_;
  std::vector<uint16_t> half_;
};

// "f32" / "fp32" -> f32, "bf16" -> bf16, "f16" / "fp16" -> f16; ConfigError naming `option` otherwise.
DType parse_params_dtype(const std::string& text, const std::string& option);

}  // namespace tessera::convert
