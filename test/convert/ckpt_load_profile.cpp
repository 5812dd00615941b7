// ckpt_load_profile CKPT_FOLDER [REPEATS] [open]: where a same-layout load's time goes. Each repeat
// constructs a CheckpointReader (opens the files, indexes every dataset: HDF5 metadata) and reads
// every saved tensor at its saved layout into buffers allocated and touched once before the first
// repeat (as a trainer's parameter and optimizer buffers are), and prints both times. With a third
// argument "open" it only constructs and destroys readers and prints the mean time of one.
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

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Target {
  std::string kind;
  ckpt::TensorShard shard;
  std::unique_ptr<Buffer> buffer;
};

int profile_main(int argc, char** argv) {
  if (argc < 2) TESSERA_CONFIG_FAIL("usage: ckpt_load_profile CKPT_FOLDER [REPEATS] [open]");
  const int repeats = argc > 2 ? std::stoi(argv[2]) : 5;
  if (argc > 3) {
    const auto start = Clock::now();
    for (int r = 0; r < repeats; ++r) ckpt::CheckpointReader reader(argv[1]);
    std::printf("{\"open_and_close_ms\": %.2f}\n", since(start) * 1e3 / repeats);
    return 0;
  }
  std::vector<Target> targets;
  uint64_t bytes = 0;
  {
    ckpt::CheckpointReader reader(argv[1]);
    for (const auto& e : reader.tensors()) {
      Shape local = e.global_shape;
      if (e.split_axis >= 0) local[e.split_axis] /= e.shards;  // rank 0's shard at the saved layout
      Target t;
      t.kind = e.kind;
      t.buffer = std::make_unique<Buffer>(static_cast<size_t>(shape_numel(local)) * dtype_size(e.dtype));
      std::memset(t.buffer->data(), 0, t.buffer->size());
      t.shard = {e.name, t.buffer->as_tensor(e.dtype, local), e.global_shape, e.split_axis, 0};
      bytes += t.buffer->size();
      targets.push_back(std::move(t));
    }
  }
  for (int round = 1; round <= repeats; ++round) {
    const auto start = Clock::now();
    ckpt::CheckpointReader reader(argv[1]);
    const double open_s = since(start);
    const auto reads_start = Clock::now();
    for (Target& t : targets)
      reader.read_slices(t.kind, t.shard.name, t.shard, 0, t.shard.local.numel(), t.shard.local.data(),
                         t.shard.local.dtype());
    const double read_s = since(reads_start), total_s = since(start);
    std::printf("{\"round\": %d, \"tensors\": %zu, \"bytes\": %llu, \"open_ms\": %.1f, \"reads_ms\": %.1f, "
                "\"total_ms\": %.1f, \"MBps\": %.1f, \"reads_MBps\": %.1f}\n",
                round, targets.size(), static_cast<unsigned long long>(bytes), open_s * 1e3, read_s * 1e3,
                total_s * 1e3, bytes / 1e6 / total_s, bytes / 1e6 / read_s);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, profile_main); }
