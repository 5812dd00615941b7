// Checkpoint resharding across layouts (label mpi): `save DIR TP PP SHARDED` writes a synthetic
// GPT-shaped model (column-, row-parallel and replicated tensors over PP stages, tied output layer
// on the last stage) and its optimizer state (whole, or sharded over DP as flat slices);
// `load DIR TP PP SHARDED` reads it in another layout and checks every element bitwise.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/ckpt/checkpoint_save.h"
#include "tessera/train/training_checkpoints.h"
#include "tessera/core/rng.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/runtime.h"

namespace {

using namespace tessera;

constexpr int64_t kLayers = 4, kHidden = 8, kVocab = 32;

struct Spec {
  std::string name;
  Shape global;
  int axis;  // split over TP along this axis, -1: replicated
};

// The tensors pipeline stage `stage` of `pp` holds (global layer names, Megatron keys).
std::vector<Spec> stage_tensors(int stage, int pp) {
  std::vector<Spec> specs;
  if (stage == 0) specs.push_back({"embedding.word_embeddings.weight", {kVocab, kHidden}, 0});
  for (int64_t l = stage * kLayers / pp; l < (stage + 1) * kLayers / pp; ++l) {
    std::string p = "decoder.layers." + std::to_string(l) + ".";
    specs.push_back({p + "input_layernorm.weight", {kHidden}, -1});
    specs.push_back({p + "self_attention.linear_qkv.weight", {3 * kHidden, kHidden}, 0});
    specs.push_back({p + "self_attention.linear_proj.weight", {kHidden, 3 * kHidden}, 1});
  }
  if (stage == pp - 1) {
    specs.push_back({"decoder.final_layernorm.weight", {kHidden}, -1});
    if (pp > 1) specs.push_back({"output_layer.weight", {kVocab, kHidden}, 0});
  }
  return specs;
}

// The value of element i of a global tensor: the tied output layer equals the word embeddings.
float expected(const std::string& kind, std::string name, int64_t i) {
  if (name == "output_layer.weight") name = "embedding.word_embeddings.weight";
  RandomStream stream(kind == "param" ? 1 : kind == "exp_avg" ? 2 : 3, stream_id(name));
  return static_cast<float>(stream.normal(static_cast<uint64_t>(i)));
}

struct Local {
  ckpt::TensorShard shard;
  std::vector<float> values;
};

Local make_local(const Spec& spec, int tp, int tp_rank) {
  Local local;
  Shape shape = spec.global;
  int64_t offset = 0;
  if (spec.axis >= 0) {
    shape[spec.axis] /= tp;
    offset = shape[spec.axis] * tp_rank;
  }
  local.values.assign(static_cast<size_t>(shape_numel(shape)), 0.0f);
  local.shard = {spec.name, Tensor(local.values.data(), DType::f32, shape), spec.global, spec.axis, offset};
  return local;
}

// Element i of the local shard -> index in the global tensor.
int64_t global_index(const ckpt::TensorShard& s, int64_t i) {
  if (s.split_axis < 0) return i;
  const Shape& l = s.local.shape();
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(s.split_axis) + 1; d < l.size(); ++d) inner *= l[d];
  int64_t ld = l[s.split_axis], gd = s.global_shape[s.split_axis];
  int64_t outer = i / (ld * inner), mid = (i / inner) % ld, in = i % inner;
  return (outer * gd + s.split_offset + mid) * inner + in;
}

int run(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: ckpt_reshard_test save|load DIR TP PP SHARDED\n");
    return 2;
  }
  std::string mode = argv[1], dir = argv[2];
  int tp = std::atoi(argv[3]), pp = std::atoi(argv[4]);
  bool sharded = std::atoi(argv[5]) != 0;
  Runtime& runtime = Runtime::init(nullptr, nullptr);
  train::ParallelConfig pc{};
  pc.tensor_model_parallel_size = tp;
  pc.pipeline_model_parallel_size = pp;
  pc.expert_model_parallel_size = 1;
  pc.recompute_num_layers = 1;
  parallel::ParallelContext context(pc, runtime.world_size(), runtime.world_rank(), Device::cpu());
  ckpt::ShardCoordinates c = ckpt::coordinates_of(context);

  std::vector<Local> model;
  for (const Spec& spec : stage_tensors(c.pp_rank, pp)) model.push_back(make_local(spec, tp, c.tp_rank));
  // Optimizer slices: the whole local shard, or this DP rank's share of it (uneven splits included).
  std::vector<std::vector<float>> storage;
  storage.reserve(model.size() * 2);
  ckpt::OptimizerState optimizer;
  optimizer.step = 7;
  optimizer.distributed = sharded;
  for (const Local& m : model) {
    int64_t n = m.shard.local.numel();
    int64_t begin = sharded ? n * c.dp_rank / c.dp_size : 0, end = sharded ? n * (c.dp_rank + 1) / c.dp_size : n;
    ckpt::OptimizerSlice slice;
    slice.param = m.shard;
    slice.flat_offset = begin;
    slice.count = end - begin;
    storage.emplace_back(static_cast<size_t>(slice.count), 0.0f);
    slice.exp_avg = Tensor(storage.back().data(), DType::f32, {slice.count});
    storage.emplace_back(static_cast<size_t>(slice.count), 0.0f);
    slice.exp_avg_sq = Tensor(storage.back().data(), DType::f32, {slice.count});
    optimizer.slices.push_back(slice);
  }

  int64_t mismatches = 0;
  if (mode == "save") {
    for (Local& m : model)
      for (int64_t i = 0; i < m.shard.local.numel(); ++i)
        m.values[i] = expected("param", m.shard.name, global_index(m.shard, i));
    for (auto& s : optimizer.slices)
      for (int64_t i = 0; i < s.count; ++i) {
        s.exp_avg.data_as<float>()[i] = expected("exp_avg", s.param.name, global_index(s.param, s.flat_offset + i));
        s.exp_avg_sq.data_as<float>()[i] =
            expected("exp_avg_sq", s.param.name, global_index(s.param, s.flat_offset + i));
      }
    ckpt::SaveRequest request;
    request.save_dir = dir;
    request.iteration = 7;
    request.coords = c;
    for (const Local& m : model) request.model.push_back(m.shard);
    request.optimizer = &optimizer;
    request.progress.iteration = 7;
    request.progress.consumed_samples = 123;
    request.progress.seed = 1234;
    request.metadata.config_toml = "[parallel]\ntensor_model_parallel_size = " + std::to_string(tp) + "\n";
    ckpt::save_checkpoint(request, context.world());
  } else {
    auto tracker = ckpt::read_tracker(dir);
    TESSERA_CHECK(tracker && tracker->iteration == 7, "no checkpoint at iteration 7 in ", dir);
    ckpt::CheckpointReader reader(ckpt::checkpoint_folder(dir, *tracker));
    TESSERA_CHECK(reader.progress().consumed_samples == 123 && reader.optimizer_scalars().step == 7,
                  "progress not restored");
    auto source = [&](const std::string& kind, const std::string& name) {
      return !reader.has(kind, name) && name == "output_layer.weight" ? std::string("embedding.word_embeddings.weight")
                                                                       : name;
    };
    for (Local& m : model) {
      reader.read_model(m.shard, source("param", m.shard.name));
      for (int64_t i = 0; i < m.shard.local.numel(); ++i)
        mismatches += m.values[i] != expected("param", m.shard.name, global_index(m.shard, i));
    }
    for (auto& s : optimizer.slices) {
      reader.read_optimizer("exp_avg", s, s.exp_avg, source("exp_avg", s.param.name));
      reader.read_optimizer("exp_avg_sq", s, s.exp_avg_sq, source("exp_avg_sq", s.param.name));
      for (int64_t i = 0; i < s.count; ++i) {
        int64_t g = global_index(s.param, s.flat_offset + i);
        mismatches += s.exp_avg.data_as<float>()[i] != expected("exp_avg", s.param.name, g);
        mismatches += s.exp_avg_sq.data_as<float>()[i] != expected("exp_avg_sq", s.param.name, g);
      }
    }
  }
  TESSERA_CHECK(mismatches == 0, "rank ", c.world_rank, " (tp ", c.tp_rank, ", pp ", c.pp_rank, ", dp ", c.dp_rank,
                "): ", mismatches, " elements differ after loading");
  if (c.world_rank == 0) std::printf("%s TP=%d PP=%d DP=%d sharded=%d: ok\n", mode.c_str(), tp, pp, c.dp_size, sharded);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, run); }
