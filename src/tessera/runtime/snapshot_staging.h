// Host copies of tensors for the asynchronous checkpoint save (ckpt/async_checkpoint_save.h), cheap
// for the step in which they are taken. A CUDA tensor gets a device staging buffer and a pinned host
// buffer (cudaMalloc, cudaHostAlloc), allocated once and reused by every later snapshot. copy()
// records, on the step loop's thread, the point of the compute stream the snapshot stands for (one
// event) and the tensor's device-to-device copy into its staging buffer; the copies are issued, on
// a copy stream of their own after that event, by the first of wait_host (the writer thread, right
// after the snapshot) and order_before_update (the step loop, before the next parameter update),
// so the step loop does not pay for hundreds of copy calls between two steps. They run at device
// memory bandwidth (about a millisecond for the 124M checkpoint), overlapping the next
// forward/backward; the next update waits for them on the compute stream (an event, no host wait).
// The writer thread (wait_host) then moves the staging to the pinned host buffers in chunks of
// kDrainChunkBytes, one at a time, so that the step loop's own small device-to-host copies never
// queue behind the whole checkpoint on the copy engine. When the device has no room for a staging
// buffer, that tensor is copied straight to its host buffer instead (the update then waits for that
// slower copy). A CPU tensor is copied at once into a plain host buffer, also reused.
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

  // The compute stream's later work waits for the last snapshot's device copies (once per snapshot;
  // issues them if no wait_host has yet; nothing to do on the CPU). Call before the first kernel that
  // writes a snapshotted tensor.
  void order_before_update();
  // Blocks the calling thread (any thread) until the last snapshot's values are in the host buffers
  // copy() returned (on a GPU: moves the device staging to them, chunk by chunk, on the copy stream).
  // Not concurrent with begin()/copy()/end() (the async save calls it on its writer thread, between
  // one snapshot and the next).
  void wait_host();
  static constexpr size_t kDrainChunkBytes = size_t(16) << 20;
  size_t host_bytes() const;  // held by the host buffers (the device staging holds as much for CUDA tensors)

 private:
  struct Slot;
  struct Cuda;
  Slot& slot_for(const Tensor& src);
  static void issue_copies(Cuda& c);  // CUDA builds: the last snapshot's copies, once (any thread)
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t next_ = 0;
  std::unique_ptr<Cuda> cuda_;  // created with the first CUDA tensor
};

}  // namespace tessera
