#include "tessera/ops/cuda/pinned_scalar_reads.h"

#include <mutex>
#include <vector>

#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda {
namespace {

struct Slot {
  double* host = nullptr;  // pinned
  cudaEvent_t copied = nullptr;
};

// Never destroyed (a reading may outlive static destruction order); the process exit frees it.
class SlotPool {
 public:
  static SlotPool& get() {
    static SlotPool* pool = new SlotPool();
    return *pool;
  }
  Slot acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) grow();
    Slot slot = free_.back();
    free_.pop_back();
    return slot;
  }
  void release(Slot slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot);
  }

 private:
  static constexpr int kChunk = 64;
  void grow() {
    double* chunk = nullptr;
    TESSERA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&chunk), kChunk * sizeof(double)));
    for (int i = 0; i < kChunk; ++i) {
      Slot slot{chunk + i, nullptr};
      TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
      free_.push_back(slot);
    }
  }
  std::mutex mutex_;
  std::vector<Slot> free_;
};

class PinnedReading final : public PendingDouble {
 public:
  explicit PinnedReading(Slot slot) : slot_(slot) {}
  ~PinnedReading() override { SlotPool::get().release(slot_); }  // a later copy is queued after this one
  PinnedReading(const PinnedReading&) = delete;
  PinnedReading& operator=(const PinnedReading&) = delete;
  double wait() const override {
    TESSERA_CUDA_CHECK(cudaEventSynchronize(slot_.copied));
    return *slot_.host;
  }

 private:
  Slot slot_;
};

}  // namespace

std::shared_ptr<const PendingDouble> read_device_double_async(const double* device_value, cudaStream_t stream) {
  const Slot slot = SlotPool::get().acquire();
  auto reading = std::make_shared<PinnedReading>(slot);  // returns the slot should a call below throw
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(slot.host, device_value, sizeof(double), cudaMemcpyDeviceToHost, stream));
  TESSERA_CUDA_CHECK(cudaEventRecord(slot.copied, stream));
  return reading;
}

}  // namespace tessera::ops::cuda
