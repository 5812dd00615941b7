// Asynchronous checkpoint save (Megatron's --async-save): start() takes a snapshot of this rank's
// tensors (runtime/snapshot_staging.h: reused buffers; on a GPU device staging copied on a copy
// stream of its own, then moved to pinned host buffers by the writer) and prepares the save
// (collective), then a background thread brings the snapshot to the host and writes the files into
// the temporary folder while training continues. The trainer
// calls order_before_update() before its next optimizer step, so that step's writes to the
// parameters and optimizer state wait for the copies on the GPU (the forward/backward before it
// overlaps them). try_finish(), called by every rank once per
// iteration, agrees over the world whether every writer is done (one small all-reduce) and, when
// so, commits exactly as save_checkpoint does (barrier, rename, tracker, pruning): the same files,
// the same atomicity. A writer that failed on any rank ends every rank with its message and the
// temporary folder removed. Only the main thread communicates (MPI_THREAD_FUNNELED); the writer
// thread is the only HDF5 user while it runs.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "tessera/ckpt/checkpoint_save.h"
#include "tessera/core/buffer.h"
#include "tessera/runtime/snapshot_staging.h"

namespace tessera::ckpt {

class AsyncCheckpointSave {
 public:
  AsyncCheckpointSave() = default;
  ~AsyncCheckpointSave();  // joins a running writer (its save is abandoned, never committed)
  AsyncCheckpointSave(const AsyncCheckpointSave&) = delete;
  AsyncCheckpointSave& operator=(const AsyncCheckpointSave&) = delete;

  // Collective. Requires !pending(). `request.optimizer` may be null (weights only).
  void start(const SaveRequest& request, Communicator& world);
  // Allocates the snapshot's host buffers for the tensors of `request` now (local, no copy), so
  // the first start() does not pay for them. Requires !pending().
  void reserve(const SaveRequest& request);
  // Before the next kernel that writes a snapshotted tensor (the optimizer step): the GPU orders
  // it after the snapshot's copies. No host wait; nothing to do on the CPU or without a snapshot.
  void order_before_update() { staging_.order_before_update(); }
  bool pending() const { return in_flight_ != nullptr; }
  int64_t iteration() const { return in_flight_ ? in_flight_->request.iteration : -1; }

  // Collective (every rank, while pending()): the result once every rank's writer is done and the
  // save is committed; nullopt while some writer still runs.
  std::optional<SaveResult> try_finish(Communicator& world);
  // Collective: waits for the writers, then commits.
  SaveResult finish(Communicator& world);

 private:
  struct InFlight {
    OptimizerState optimizer;  // its tensors, and the request's, view staging_'s host buffers
    SaveRequest request;
    PreparedSave prepared;
    std::thread writer;
    std::atomic<bool> done{false};
    std::exception_ptr failure;
  };
  // The request's tensors in a fixed order (the order staging_'s buffers are reused in).
  template <typename F>
  static void for_each_tensor(SaveRequest& request, OptimizerState* optimizer, F&& f);
  SnapshotStaging staging_;  // declared first: outlives the writer of in_flight_
  std::unique_ptr<InFlight> in_flight_;
};

}  // namespace tessera::ckpt
