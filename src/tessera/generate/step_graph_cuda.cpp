#include <cuda_runtime.h>

#include "tessera/core/cuda_check.h"
#include "tessera/core/logging.h"
#include "tessera/generate/step_graph.h"
#include "tessera/runtime/compute_stream.h"

namespace tessera::generate {

StepGraph::~StepGraph() { reset(); }

void StepGraph::reset() {
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  exec_ = graph_ = nullptr;
}

bool StepGraph::capture(const std::function<void()>& fn) {
  reset();
  cudaStream_t stream = compute_stream();
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  TESSERA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  std::string failure;
  try {
    fn();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (failure.empty() && end != cudaSuccess) failure = cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
    if (rc != cudaSuccess) failure = cudaGetErrorString(rc);
  }
  if (!failure.empty()) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // clear the capture's error; the stream is no longer capturing
    log::warn("tessera-generate: capturing the decode step as a CUDA graph failed (", failure,
              "); running it eagerly");
    return false;
  }
  graph_ = graph;
  exec_ = exec;
  return true;
}

void StepGraph::launch() {
  TESSERA_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), compute_stream()));
}

}  // namespace tessera::generate
