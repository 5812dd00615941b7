#include "tessera/runtime/snapshot_staging.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/core/cuda_check.h"
#include "tessera/runtime/compute_stream.h"
#endif

namespace tessera {

// One snapshot slot: a host buffer (pinned for a CUDA source, plain for a CPU one) and, for a CUDA
// source, a device staging buffer of the same size (none when the device has no room for it: that
// slot is then copied straight to the host, as before the staging existed).
struct SnapshotStaging::Slot {
  void* data = nullptr;
  void* device = nullptr;
  size_t bytes = 0;
  size_t used = 0;  // bytes of the current snapshot's tensor (<= bytes)
  bool pinned = false;
  Buffer plain;
  Slot(size_t n, bool pin) : bytes(n), pinned(pin) {
    if (!pinned) {
      plain = Buffer(n);
      data = plain.data();
      return;
    }
#ifdef TESSERA_HAVE_CUDA
    TESSERA_CUDA_CHECK(cudaHostAlloc(&data, n, cudaHostAllocDefault));
    cudaError_t rc = cudaMalloc(&device, n);
    if (rc == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: cleared, so no later check reports it
      device = nullptr;
      warn_no_device_staging(n);
    } else {
      TESSERA_CUDA_CHECK(rc);
    }
#else
    TESSERA_FAIL("a pinned snapshot buffer needs a CUDA build");
#endif
  }
  ~Slot() {
#ifdef TESSERA_HAVE_CUDA
    if (device) (void)cudaFree(device);  // destructor: nothing to report to
    if (pinned && data) (void)cudaFreeHost(data);
#endif
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  static void warn_no_device_staging(size_t n) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log::warn("WARNING: no device memory for a ", n, "-byte snapshot staging buffer of the asynchronous "
                "checkpoint save: such tensors are copied straight to the host, which can slow the step "
                "during a save");
  }
};

#ifdef TESSERA_HAVE_CUDA
struct SnapshotStaging::Cuda {
  int device = 0;
  cudaStream_t copy_stream = nullptr;
  cudaEvent_t issued = nullptr;  // on the compute stream: the work the copies must follow
  cudaEvent_t ready = nullptr;   // on the copy stream: the snapshot's device copies are done
  cudaEvent_t chunk = nullptr;   // on the copy stream: the writer's last device-to-host chunk is done
  bool started = false;          // this snapshot has issued its first copy
  bool recorded = false;         // `ready` stands for the last snapshot
  bool update_waits = false;     // the compute stream has not yet been ordered after `ready`
  bool drain = false;            // the last snapshot's device staging still has to reach the host
  // The snapshot's copies, recorded by copy() on the step loop's thread and issued by the first of
  // wait_host (the writer thread) and order_before_update (the step loop) under `mutex`: the step
  // loop does not pay for hundreds of cudaMemcpyAsync calls between two steps.
  struct Pending {
    void* dst;
    const void* src;
    size_t bytes;
    cudaMemcpyKind kind;
  };
  std::vector<Pending> pending;
  std::mutex mutex;
  bool issued_copies = true;  // the pending copies are on the copy stream and `ready` follows them
  Cuda() {
    TESSERA_CUDA_CHECK(cudaGetDevice(&device));
    // Non-blocking: ordered with the compute stream only through the events, never implicitly.
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&issued, cudaEventDisableTiming));
    // Blocking sync: the writer thread sleeps in wait_host instead of spinning on a core the step
    // loop may need.
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming | cudaEventBlockingSync));
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&chunk, cudaEventDisableTiming | cudaEventBlockingSync));
  }
  ~Cuda() {
    // At exit the runtime may be unloading: release quietly, after the copies in flight.
    (void)cudaStreamSynchronize(copy_stream);
    (void)cudaEventDestroy(chunk);
    (void)cudaEventDestroy(ready);
    (void)cudaEventDestroy(issued);
    (void)cudaStreamDestroy(copy_stream);
  }
};
#else
struct SnapshotStaging::Cuda {};
#endif

SnapshotStaging::SnapshotStaging() = default;

SnapshotStaging::~SnapshotStaging() {
  cuda_.reset();  // the copies in flight end before their buffers are freed
  slots_.clear();
}

void SnapshotStaging::begin() {
  next_ = 0;
  for (auto& slot : slots_)
    if (slot) slot->used = 0;
#ifdef TESSERA_HAVE_CUDA
  if (cuda_) {
    cuda_->started = false;
    cuda_->drain = false;  // a snapshot nobody waited for is dropped
  }
#endif
}

SnapshotStaging::Slot& SnapshotStaging::slot_for(const Tensor& src) {
  const bool pinned = src.device().is_cuda();
  if (next_ == slots_.size()) slots_.push_back(nullptr);
  auto& slot = slots_[next_++];
  if (!slot || slot->bytes < src.nbytes() || slot->pinned != pinned) {
    slot.reset();  // frees the old buffer first: the host need not hold both
    slot = std::make_unique<Slot>(src.nbytes(), pinned);
  }
  return *slot;
}

void SnapshotStaging::reserve(const Tensor& src) {
  if (!src.defined() || src.nbytes() == 0) return;
#ifdef TESSERA_HAVE_CUDA
  if (src.device().is_cuda() && !cuda_) cuda_ = std::make_unique<Cuda>();
#endif
  (void)slot_for(src);
}

Tensor SnapshotStaging::copy(const Tensor& src) {
  if (!src.defined()) return src;
  if (src.nbytes() == 0) return Tensor(nullptr, src.dtype(), src.shape());
  Slot& slot = slot_for(src);
  slot.used = src.nbytes();
  Tensor host(slot.data, src.dtype(), src.shape());
  if (src.device().is_cpu()) {
    std::memcpy(slot.data, src.data(), src.nbytes());
    return host;
  }
#ifdef TESSERA_HAVE_CUDA
  if (!cuda_) cuda_ = std::make_unique<Cuda>();
  Cuda& c = *cuda_;
  if (!c.started) {  // the copies follow everything issued on the compute stream so far
    TESSERA_CUDA_CHECK(cudaEventRecord(c.issued, compute_stream()));
    c.pending.clear();
    c.started = true;
  }
  // Device to device when the slot has device staging: fast (device memory bandwidth), so the update
  // that waits for it barely waits; the writer thread moves the staging to the host later
  // (wait_host), in chunks. Otherwise straight to the pinned host buffer.
  if (slot.device) {
    c.pending.push_back({slot.device, src.data(), src.nbytes(), cudaMemcpyDeviceToDevice});
    c.drain = true;
  } else {
    c.pending.push_back({slot.data, src.data(), src.nbytes(), cudaMemcpyDeviceToHost});
  }
#else
  TESSERA_FAIL("snapshot of ", src.describe(), " needs a CUDA build");
#endif
  return host;
}

void SnapshotStaging::end() {
#ifdef TESSERA_HAVE_CUDA
  if (cuda_ && cuda_->started) {
    std::lock_guard<std::mutex> lock(cuda_->mutex);
    cuda_->issued_copies = false;  // issue_copies() records `ready` after them
    cuda_->recorded = true;
    cuda_->update_waits = true;
    cuda_->started = false;
  }
#endif
}

#ifdef TESSERA_HAVE_CUDA
// Issues the last snapshot's copies on the copy stream (after the compute stream's work up to the
// snapshot) and records `ready` after them, unless that is done. Any thread.
void SnapshotStaging::issue_copies(Cuda& c) {
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.issued_copies) return;
  TESSERA_CUDA_CHECK(cudaSetDevice(c.device));  // a new thread starts on device 0
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(c.copy_stream, c.issued, 0));
  for (const auto& p : c.pending) TESSERA_CUDA_CHECK(cudaMemcpyAsync(p.dst, p.src, p.bytes, p.kind, c.copy_stream));
  TESSERA_CUDA_CHECK(cudaEventRecord(c.ready, c.copy_stream));
  c.issued_copies = true;
}
#endif

void SnapshotStaging::order_before_update() {
#ifdef TESSERA_HAVE_CUDA
  if (cuda_ && cuda_->update_waits) {
    issue_copies(*cuda_);  // normally done by then on the writer thread; else now
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), cuda_->ready, 0));
    cuda_->update_waits = false;
  }
#endif
}

void SnapshotStaging::wait_host() {
#ifdef TESSERA_HAVE_CUDA
  if (!cuda_ || !cuda_->recorded) return;
  Cuda& c = *cuda_;
  issue_copies(c);
  TESSERA_CUDA_CHECK(cudaSetDevice(c.device));  // a new thread starts on device 0
  TESSERA_CUDA_CHECK(cudaEventSynchronize(c.ready));
  if (!c.drain) return;
  // Device staging to the pinned host buffers in chunks of kDrainChunkBytes, one at a time: the
  // copy engine never holds more than one chunk of ours, so the step loop's own device-to-host
  // copies (the loss, the grad norm) queue behind at most one chunk, not the whole checkpoint.
  for (size_t i = 0; i < next_ && i < slots_.size(); ++i) {
    Slot* slot = slots_[i].get();
    if (!slot || !slot->device || slot->used == 0) continue;
    for (size_t offset = 0; offset < slot->used; offset += kDrainChunkBytes) {
      size_t n = std::min(kDrainChunkBytes, slot->used - offset);
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(slot->data) + offset,
                                         static_cast<const char*>(slot->device) + offset, n,
                                         cudaMemcpyDeviceToHost, c.copy_stream));
      TESSERA_CUDA_CHECK(cudaEventRecord(c.chunk, c.copy_stream));
      TESSERA_CUDA_CHECK(cudaEventSynchronize(c.chunk));
    }
  }
  c.drain = false;
#endif
}

size_t SnapshotStaging::host_bytes() const {
  size_t total = 0;
  for (const auto& slot : slots_) total += slot ? slot->bytes : 0;
  return total;
}

}  // namespace tessera
