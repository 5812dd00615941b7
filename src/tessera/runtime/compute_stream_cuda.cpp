// The process's compute stream (see compute_stream.h).
#include "tessera/runtime/compute_stream.h"

#include "tessera/core/cuda_check.h"

namespace tessera {

namespace {
struct ComputeStream {
  cudaStream_t stream = nullptr;
  ComputeStream() { TESSERA_CUDA_CHECK(cudaStreamCreate(&stream)); }  // blocking
  ~ComputeStream() {
    // At process exit the runtime may already be unloading: release quietly.
    (void)cudaStreamSynchronize(stream);
    (void)cudaStreamDestroy(stream);
  }
};
}  // namespace

cudaStream_t compute_stream() {
  static ComputeStream holder;
  return holder.stream;
}

}  // namespace tessera
