// Builds without CUDA: no graph is ever captured (StepGraph::ready() stays false).
#ifndef TESSERA_HAVE_CUDA
#include "tessera/generate/step_graph.h"

namespace tessera::generate {

StepGraph::~StepGraph() = default;
bool StepGraph::capture(const std::function<void()>&) { return false; }
void StepGraph::launch() {}
void StepGraph::reset() {}

}  // namespace tessera::generate
#endif
