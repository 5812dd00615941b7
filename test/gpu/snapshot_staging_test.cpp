// The asynchronous checkpoint save's GPU snapshot (runtime/snapshot_staging.h) on one GPU:
// 1. staging round trip: device tensors (one larger than two drain chunks and not a multiple of
//    one, a small bf16 one, an empty one) snapshotted, then overwritten on the compute stream right
//    after order_before_update, come back from wait_host (on another thread, as the writer calls
//    it) with the values of the time of the snapshot, twice (the second snapshot reuses the buffers);
// 2. sync vs async: two deterministic-mode GPU trainings, one saving synchronously, one
//    asynchronously, write checkpoints whose every tensor, optimizer scalar and progress field are
//    bitwise equal, and train the same losses.
// Exits 77 without a GPU, 1 on the first failure.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device_test_support.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/runtime/compute_stream.h"
#include "tessera/runtime/runtime.h"
#include "tessera/runtime/snapshot_staging.h"
#include "tessera/train/trainer.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

void cuda_ok(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}

struct DeviceBytes {
  void* data = nullptr;
  size_t bytes = 0;
  explicit DeviceBytes(size_t n) : bytes(n) {
    if (n) cuda_ok(cudaMalloc(&data, n), "cudaMalloc");
  }
  ~DeviceBytes() { cudaFree(data); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

std::vector<unsigned char> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

void staging_round_trip() {
  std::mt19937 rng(7);
  // 10'000'003 f32: 40 MB, two whole 16 MiB chunks and a partial one.
  const std::vector<std::pair<DType, Shape>> specs = {{DType::f32, {10'000'003}}, {DType::bf16, {7}}, {DType::f32, {0}}};
  std::vector<std::unique_ptr<DeviceBytes>> device;
  std::vector<Tensor> tensors;
  for (const auto& [dtype, shape] : specs) {
    device.push_back(std::make_unique<DeviceBytes>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype)));
    tensors.emplace_back(device.back()->data, dtype, shape, Device::cuda(0));
  }
  SnapshotStaging staging;
  staging.begin();
  for (const Tensor& t : tensors) staging.reserve(t);
  staging.end();
  std::vector<void*> first_pointers;
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<unsigned char>> values;
    for (size_t i = 0; i < tensors.size(); ++i) {
      values.push_back(random_bytes(rng, device[i]->bytes));
      if (device[i]->bytes)
        cuda_ok(cudaMemcpy(device[i]->data, values[i].data(), device[i]->bytes, cudaMemcpyHostToDevice), "upload");
    }
    cuda_ok(cudaDeviceSynchronize(), "sync");
    staging.begin();
    std::vector<Tensor> host;
    for (const Tensor& t : tensors) host.push_back(staging.copy(t));
    host.push_back(staging.copy(Tensor()));  // undefined: stays undefined
    staging.end();
    staging.order_before_update();
    // The "optimizer step": overwrites every source on the compute stream, ordered after the copies.
    for (auto& d : device)
      if (d->bytes) cuda_ok(cudaMemsetAsync(d->data, 0xEE, d->bytes, compute_stream()), "overwrite");
    std::thread writer([&] { staging.wait_host(); });
    writer.join();
    cuda_ok(cudaDeviceSynchronize(), "sync");
    bool same = true;
    for (size_t i = 0; i < tensors.size(); ++i) {
      same = same && host[i].device().is_cpu() && host[i].shape() == tensors[i].shape();
      if (device[i]->bytes) same = same && std::memcmp(host[i].data(), values[i].data(), device[i]->bytes) == 0;
    }
    check(same, "snapshot " + std::to_string(round + 1) + " holds the values at the time of the snapshot");
    check(!host.back().defined(), "an undefined tensor stays undefined");
    if (round == 0) {
      for (size_t i = 0; i < tensors.size(); ++i) first_pointers.push_back(host[i].data());
      check(staging.host_bytes() == device[0]->bytes + device[1]->bytes, "host buffers as reserved");
    } else {
      bool reused = true;
      for (size_t i = 0; i < tensors.size(); ++i) reused = reused && host[i].data() == first_pointers[i];
      check(reused, "the second snapshot reuses the first one's buffers");
    }
  }
}

train::Config config(const fs::path& save, bool async) {
  // Two layers, a 12000-entry vocabulary: the word embeddings' fp32 optimizer tensors (24 MB each)
  // take more than one drain chunk.
  return train::load_config("", {"data.mock_data=true", "data.vocab_size=12000", "model.num_layers=2",
                                 "model.hidden_size=512", "model.num_attention_heads=8", "model.seq_length=64",
                                 "model.max_position_embeddings=64", "training.micro_batch_size=4",
                                 "training.global_batch_size=8", "training.train_iters=7",
                                 "training.eval_interval=0", "training.deterministic_mode=true",
                                 "training.device=cuda", "training.precision=bf16", "optimizer.lr_warmup_iters=1",
                                 "logging.log_interval=100", "checkpoint.save_interval=2",
                                 "checkpoint.save=" + save.string(),
                                 std::string("checkpoint.async_save=") + (async ? "true" : "false")});
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void sync_equals_async(Device device) {
  fs::path base = fs::temp_directory_path() / ("tessera_gpu_snapshot_" + std::to_string(::getpid()));
  fs::remove_all(base);
  auto sync = train::Trainer(config(base / "sync", false), device).train();
  auto async = train::Trainer(config(base / "async", true), device).train();
  check(sync.lm_loss.size() == 7 && sync.lm_loss == async.lm_loss, "the async run trains the same losses");
  for (const char* iter : {"iter_0000002", "iter_0000004", "iter_0000006", "iter_0000007"}) {
    if (!fs::is_directory(base / "sync" / iter) || !fs::is_directory(base / "async" / iter)) {
      check(false, std::string(iter) + " saved by both runs");
      continue;
    }
    ckpt::CheckpointReader s(base / "sync" / iter), a(base / "async" / iter);
    auto entries = s.tensors();
    bool same = !entries.empty() && entries.size() == a.tensors().size() && s.has_optimizer() && a.has_optimizer();
    size_t compared = 0;
    for (const auto& e : entries) {
      Shape shape_s, shape_a;
      std::vector<float> vs = s.read_global(e.kind, e.name, shape_s);
      std::vector<float> va = a.read_global(e.kind, e.name, shape_a);
      if (shape_s != shape_a || !same_floats(vs, va)) {
        std::printf("  differs: %s %s\n", e.kind.c_str(), e.name.c_str());
        same = false;
      }
      ++compared;
    }
    const auto ps = s.progress(), pa = a.progress();
    same = same && ps.iteration == pa.iteration && ps.consumed_samples == pa.consumed_samples;
    const auto os = s.optimizer_scalars(), oa = a.optimizer_scalars();
    same = same && os.step == oa.step && std::memcmp(&os.loss_scale, &oa.loss_scale, sizeof os.loss_scale) == 0;
    check(same, std::string(iter) + ": " + std::to_string(compared) + " tensors bitwise equal (sync vs async)");
  }
  fs::remove_all(base);
}

}  // namespace

int main(int argc, char** argv) {
  if (!gpu_test::device_visible()) return 77;
  Runtime& runtime = Runtime::init(&argc, &argv);
  Device device = runtime.select_device("cuda");
  staging_round_trip();
  sync_equals_async(device);
  std::printf("%s\n", failures ? "FAILED" : "all passed");
  runtime.finalize();
  return failures ? 1 : 0;
}
