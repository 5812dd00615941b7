// The process's CUDA compute stream (CUDA builds only): the stream every op launches on and that
// NCCL communicators order their work against. Created on first use on the current device,
// blocking (ordered with the legacy default stream, which Buffer's cudaMemset uses); destroyed at exit.
#pragma once
#include <cuda_runtime.h>

namespace tessera {

cudaStream_t compute_stream();

}  // namespace tessera
