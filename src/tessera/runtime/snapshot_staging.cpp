#include "tessera/runtime/snapshot_staging.h"

#include <cstring>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/core/cuda_check.h"
#include "tessera/runtime/compute_stream.h"
#endif

namespace tessera {

// One host buffer: pinned (for a CUDA source) or plain.
struct SnapshotStaging::Slot {
  void* data = nullptr;
  size_t bytes = 0;
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
#else
    TESSERA_FAIL("a pinned snapshot buffer needs a CUDA build");
#endif
  }
  ~Slot() {
#ifdef TESSERA_HAVE_CUDA
    if (pinned && data) (void)cudaFreeHost(data);  // destructor: nothing to report to
#endif
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
};

#ifdef TESSERA_HAVE_CUDA
struct SnapshotStaging::Cuda {
  int device = 0;
  cudaStream_t copy_stream = nullptr;
  cudaEvent_t issued = nullptr;  // on the compute stream: the work the copies must follow
  cudaEvent_t ready = nullptr;   // on the copy stream: the snapshot's copies are done
  bool started = false;          // this snapshot has issued its first copy
  bool recorded = false;         // `ready` stands for the last snapshot
  bool update_waits = false;     // the compute stream has not yet been ordered after `ready`
  Cuda() {
    TESSERA_CUDA_CHECK(cudaGetDevice(&device));
    // Non-blocking: ordered with the compute stream only through the events, never implicitly.
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&issued, cudaEventDisableTiming));
    // Blocking sync: the writer thread sleeps in wait_host instead of spinning on a core the step
    // loop may need.
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming | cudaEventBlockingSync));
  }
  ~Cuda() {
    // At exit the runtime may be unloading: release quietly, after the copies in flight.
    (void)cudaStreamSynchronize(copy_stream);
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
#ifdef TESSERA_HAVE_CUDA
  if (cuda_) cuda_->started = false;
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
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(c.copy_stream, c.issued, 0));
    c.started = true;
  }
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(slot.data, src.data(), src.nbytes(), cudaMemcpyDeviceToHost, c.copy_stream));
#else
  TESSERA_FAIL("snapshot of ", src.describe(), " needs a CUDA build");
#endif
  return host;
}

void SnapshotStaging::end() {
#ifdef TESSERA_HAVE_CUDA
  if (cuda_ && cuda_->started) {
    TESSERA_CUDA_CHECK(cudaEventRecord(cuda_->ready, cuda_->copy_stream));
    cuda_->recorded = true;
    cuda_->update_waits = true;
    cuda_->started = false;
  }
#endif
}

void SnapshotStaging::order_before_update() {
#ifdef TESSERA_HAVE_CUDA
  if (cuda_ && cuda_->update_waits) {
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), cuda_->ready, 0));
    cuda_->update_waits = false;
  }
#endif
}

void SnapshotStaging::wait_host() {
#ifdef TESSERA_HAVE_CUDA
  if (cuda_ && cuda_->recorded) {
    TESSERA_CUDA_CHECK(cudaSetDevice(cuda_->device));  // a new thread starts on device 0
    TESSERA_CUDA_CHECK(cudaEventSynchronize(cuda_->ready));
  }
#endif
}

size_t SnapshotStaging::host_bytes() const {
  size_t total = 0;
  for (const auto& slot : slots_) total += slot ? slot->bytes : 0;
  return total;
}

}  // namespace tessera
