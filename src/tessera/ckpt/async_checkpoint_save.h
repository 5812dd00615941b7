// Asynchronous checkpoint save (Megatron's --async-save): start() copies this rank's tensors to a
// host snapshot and prepares the save (collective), then a background thread writes the files
// into the temporary folder while training continues. try_finish(), called by every rank once per
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

namespace tessera::ckpt {

class AsyncCheckpointSave {
 public:
  AsyncCheckpointSave() = default;
  ~AsyncCheckpointSave();  // joins a running writer (its save is abandoned, never committed)
  AsyncCheckpointSave(const AsyncCheckpointSave&) = delete;
  AsyncCheckpointSave& operator=(const AsyncCheckpointSave&) = delete;

  // Collective. Requires !pending(). `request.optimizer` may be null (weights only).
  void start(const SaveRequest& request, Communicator& world);
  bool pending() const { return in_flight_ != nullptr; }
  int64_t iteration() const { return in_flight_ ? in_flight_->request.iteration : -1; }

  // Collective (every rank, while pending()): the result once every rank's writer is done and the
  // save is committed; nullopt while some writer still runs.
  std::optional<SaveResult> try_finish(Communicator& world);
  // Collective: waits for the writers, then commits.
  SaveResult finish(Communicator& world);

 private:
  struct InFlight {
    std::vector<std::unique_ptr<Buffer>> buffers;  // the host snapshot the request's tensors view
    OptimizerState optimizer;
    SaveRequest request;
    PreparedSave prepared;
    std::thread writer;
    std::atomic<bool> done{false};
    std::exception_ptr failure;
  };
  Tensor snapshot(InFlight& f, const Tensor& t);
  std::unique_ptr<InFlight> in_flight_;
};

}  // namespace tessera::ckpt
