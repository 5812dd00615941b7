// One decode step's device work as a CUDA graph: captured once per request (the KV cache, the step
// arena and the input buffers keep their addresses from step to step; the cached-token count is read
// from device memory), then replayed each step, so a token costs one graph launch instead of a few
// hundred kernel launches. Without CUDA (or when capture fails) ready() stays false and the caller
// runs the step eagerly. A step that feeds the next one itself (ops/decode_inputs.h) can run ahead of
// the host: launch_fetching() queues a replay and a copy of its summary into a pinned ring slot,
// fetched() waits for that slot.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::generate {

class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  bool ready() const { return exec_ != nullptr; }
  // Runs fn under stream capture on the compute stream (its device work is recorded, not executed) and
  // instantiates the graph. False, with a warning, when capture or instantiation fails (the stream is
  // left usable; run the step eagerly).
  bool capture(const std::function<void()>& fn);
  void launch();  // on the compute stream, asynchronous
  void reset();   // forget the graph (a new request, new buffers)

  // Run-ahead: launch(), then an asynchronous copy of `words` (device i32) into host ring slot `slot`
  // (< kRingSlots). fetched(slot) waits for that copy and returns the words; a slot may be reused
  // once it has been fetched. drain() waits for everything queued on the compute stream.
  static constexpr int64_t kRingSlots = 8;
  void launch_fetching(const Tensor& words, int64_t slot);
  std::vector<int32_t> fetched(int64_t slot);
  void drain();

 private:
  void free_ring();

  void* graph_ = nullptr;
  void* exec_ = nullptr;
  int32_t* ring_ = nullptr;  // pinned, kRingSlots x ring_words_
  int64_t ring_words_ = 0;
  std::vector<void*> ring_events_;  // one per slot
};

}  // namespace tessera::generate
