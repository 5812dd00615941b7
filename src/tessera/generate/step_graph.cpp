// Builds without CUDA: no graph is ever captured (StepGraph::ready() stays false).
#ifndef TESSERA_HAVE_CUDA
#include "tessera/generate/step_graph.h"

namespace tessera::generate {

StepGraph::~StepGraph() = default;
bool StepGraph::capture(const std::function<void()>&) { return false; }
void StepGraph::launch() {}
void StepGraph::reset() {}
void StepGraph::launch_fetching(const Tensor&, int64_t) {}
std::vector<int32_t> StepGraph::fetched(int64_t) { return {}; }
void StepGraph::drain() {}
void StepGraph::free_ring() {}

}  // namespace tessera::generate
#endif
