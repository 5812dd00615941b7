#include <cuda_runtime.h>

#include "tessera/core/cuda_check.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/generate/step_graph.h"
#include "tessera/runtime/compute_stream.h"

namespace tessera::generate {

StepGraph::~StepGraph() {
  reset();
  free_ring();
}

void StepGraph::free_ring() {
  for (void* e : ring_events_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
  ring_events_.clear();
  if (ring_) (void)cudaFreeHost(ring_);
  ring_ = nullptr;
  ring_words_ = 0;
}

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

void StepGraph::launch_fetching(const Tensor& words, int64_t slot) {
  TESSERA_CHECK(words.dtype() == DType::i32 && words.device().is_cuda() && slot >= 0 && slot < kRingSlots,
                "StepGraph::launch_fetching: i32 device words and a slot below ", kRingSlots, " expected");
  if (ring_words_ != words.numel()) {  // the ring is sized by the first fetch of a summary shape
    drain();
    free_ring();
    TESSERA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&ring_),
                                     static_cast<size_t>(kRingSlots * words.numel()) * sizeof(int32_t),
                                     cudaHostAllocDefault));
    ring_words_ = words.numel();
    for (int64_t i = 0; i < kRingSlots; ++i) {
      cudaEvent_t e = nullptr;
      TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      ring_events_.push_back(e);
    }
  }
  cudaStream_t stream = compute_stream();
  launch();
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(ring_ + slot * ring_words_, words.data(),
                                     static_cast<size_t>(ring_words_) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                     stream));
  TESSERA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ring_events_[static_cast<size_t>(slot)]), stream));
}

std::vector<int32_t> StepGraph::fetched(int64_t slot) {
  TESSERA_CHECK(ring_ && slot >= 0 && slot < kRingSlots, "StepGraph::fetched: no such slot ", slot);
  TESSERA_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(ring_events_[static_cast<size_t>(slot)])));
  const int32_t* words = ring_ + slot * ring_words_;
  return {words, words + ring_words_};
}

void StepGraph::drain() { TESSERA_CUDA_CHECK(cudaStreamSynchronize(compute_stream())); }

}  // namespace tessera::generate
