// ckpt_reshard_bench CKPT_FOLDER TP [REPEATS]: loading a checkpoint by slices in one process, every
// model tensor and optimizer moment, (a) at the layout it was saved with and (b) resharded to TP
// tensor-parallel ranks (each tensor split along its split axis into TP targets, all loaded here;
// each target reads the saved shards it overlaps, as each rank of the trainer's reshard-on-load
// does). Prints one JSON line per repeat with bytes, seconds and MB/s of each
// (test/bench/ckpt_io_vs_dd.sh compares them).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/main_guard.h"

using namespace tessera;

namespace {

struct Target {
  std::string kind;
  ckpt::TensorShard shard;
  std::unique_ptr<Buffer> buffer;
};

// Targets of every (kind, name) at tp ranks; saved-layout targets when tp == 0.
std::vector<Target> targets(const ckpt::CheckpointReader& reader, int tp, uint64_t& bytes) {
  std::vector<Target> out;
  bytes = 0;
  for (const auto& e : reader.tensors()) {
    const int saved_tp = e.split_axis >= 0 ? e.shards : 1;
    const int n = e.split_axis >= 0 ? (tp == 0 ? saved_tp : tp) : 1;
    for (int r = 0; r < n; ++r) {
      Shape local = e.global_shape;
      if (e.split_axis >= 0) local[e.split_axis] /= n;
      Target t;
      t.kind = e.kind;
      t.buffer = std::make_unique<Buffer>(static_cast<size_t>(shape_numel(local)) * dtype_size(e.dtype));
      // Touched before timing, as the trainer's parameter and optimizer buffers are.
      std::memset(t.buffer->data(), 0, t.buffer->size());
      t.shard = {e.name, t.buffer->as_tensor(e.dtype, local), e.global_shape, e.split_axis,
                 e.split_axis >= 0 ? r * local[e.split_axis] : 0};
      bytes += t.buffer->size();
      out.push_back(std::move(t));
    }
  }
  return out;
}

double load(const ckpt::CheckpointReader& reader, std::vector<Target>& ts) {
  auto start = std::chrono::steady_clock::now();
  for (Target& t : ts)
    reader.read_slices(t.kind, t.shard.name, t.shard, 0, t.shard.local.numel(), t.shard.local.data(),
                       t.shard.local.dtype());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int bench_main(int argc, char** argv) {
  if (argc < 3) TESSERA_CONFIG_FAIL("usage: ckpt_reshard_bench CKPT_FOLDER TP [REPEATS]");
  const int tp = std::stoi(argv[2]), repeats = argc > 3 ? std::stoi(argv[3]) : 3;
  for (int round = 1; round <= repeats; ++round) {
    ckpt::CheckpointReader reader(argv[1]);
    uint64_t same_bytes = 0, reshard_bytes = 0;
    auto same = targets(reader, 0, same_bytes);
    auto resharded = targets(reader, tp, reshard_bytes);
    const double same_s = load(reader, same), reshard_s = load(reader, resharded);
    std::printf("{\"round\": %d, \"same_layout_bytes\": %llu, \"same_layout_seconds\": %.3f, \"same_layout_MBps\": %.1f, "
                "\"reshard_tp\": %d, \"reshard_bytes\": %llu, \"reshard_seconds\": %.3f, \"reshard_MBps\": %.1f}\n",
                round, static_cast<unsigned long long>(same_bytes), same_s, same_bytes / 1e6 / same_s, tp,
                static_cast<unsigned long long>(reshard_bytes), reshard_s, reshard_bytes / 1e6 / reshard_s);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, bench_main); }
