// Host copies of tensors for the asynchronous checkpoint save (ckpt/async_checkpoint_save.h), cheap
// for the step in which they are taken. A CUDA tensor gets a pinned host buffer (cudaHostAlloc),
// allocated once and reused by every later snapshot, and its device-to-host copy is issued on a copy
// stream of its own after the compute stream's work so far (the optimizer step just issued), so the
// copy runs while the next forward/backward does. The snapshot's event is recorded after the copies:
// the next parameter update waits on it on the compute stream (order_before_update, no host wait),
// the writer thread on the host (wait_host) before it reads the buffers. A CPU tensor is copied at
// once into a plain host buffer, also reused.
#pragma once
#include <memory>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera {

class SnapshotStaging {
 public:
  SnapshotStaging();
  ~SnapshotStaging();  // waits for copies in flight, then frees the buffers
  SnapshotStaging(const SnapshotStaging&) = delete;
  SnapshotStaging& operator=(const SnapshotStaging&) = delete;

  // One snapshot: begin(), copy() per tensor in a fixed order, end(). The buffers of the previous
  // snapshot are reused in that order, so its reader must be done before the next begin().
  void begin();
  Tensor copy(const Tensor& src);  // a host tensor that holds src's values once the snapshot is ready
  void end();
  // Allocates now the buffer copy() would give `src` in this position of a snapshot, copying
  // nothing (between begin() and end() of a reservation pass): no save window pays the allocation.
  void reserve(const Tensor& src);

  // The compute stream's later work waits for the last snapshot's copies (once per snapshot;
  // nothing to do on the CPU). Call before the first kernel that writes a snapshotted tensor.
  void order_before_update();
  // Blocks the calling thread (any thread) until the last snapshot's copies are done.
  void wait_host();
  size_t host_bytes() const;  // held by the buffers

 private:
  struct Slot;
  struct Cuda;
  Slot& slot_for(const Tensor& src);
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t next_ = 0;
  std::unique_ptr<Cuda> cuda_;  // created with the first CUDA tensor
};

}  // namespace tessera
