// Runs one stage's pipeline schedule (1F1B or interleaved) over the model chunks of this rank:
// forward/backward of (micro-batch, chunk) with activations in per-slot arenas from a small pool
// (memory bounded by the micro-batches in flight), activations and their gradients exchanged with
// the neighbouring stages by Communicator::batched_p2p over the pipeline group.
#pragma once
#include <memory>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/pipeline/forward_backward.h"
#include "tessera/pipeline/schedule_check.h"

namespace tessera::parallel {

// Arenas reused across micro-batches and steps: acquire() hands out a free one (creating it when
// none is free), release() resets it and returns it to the pool.
class PipelineArenaPool {
 public:
  explicit PipelineArenaPool(size_t block_bytes = size_t(4) << 20) : block_bytes_(block_bytes) {}
  Arena* acquire(Device device);
  void release(Arena* arena);
  size_t size() const { return arenas_.size(); }

 private:
  size_t block_bytes_;
  std::vector<std::unique_ptr<Arena>> arenas_;
  std::vector<Arena*> free_;
};

// What the pipelined forward-backward keeps from step to step, owned by the run (the Trainer):
// the activation arenas and the schedule shapes already verified.
struct PipelineState {
  PipelineArenaPool arenas;
  VerifiedSchedules schedules;
};

// The pipelined forward-backward of one step (pp > 1): builds this stage's schedule (ConfigError
// for a micro-batch count the interleaved schedule cannot take), checks the whole pipeline's
// schedules once per shape, and executes it. Loss fields of the result are set on the last stage.
ForwardBackwardResult forward_backward_pipelining(const ForwardBackwardArgs& args, PipelineState& state);

}  // namespace tessera::parallel
