// One decode step's device work as a CUDA graph: captured once per request (the KV cache, the step
// arena and the input buffers keep their addresses from step to step; the cached-token count is read
// from device memory), then replayed each step, so a token costs one graph launch instead of a few
// hundred kernel launches. Without CUDA (or when capture fails) ready() stays false and the caller
// runs the step eagerly.
#pragma once
#include <functional>

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

 private:
  void* graph_ = nullptr;
  void* exec_ = nullptr;
};

}  // namespace tessera::generate
