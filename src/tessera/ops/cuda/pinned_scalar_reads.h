// Reads of device doubles without a host synchronisation (ops::DeferredSum's pending terms): the
// copy into a pinned host slot and an event after it are queued on the stream; the reading's
// wait() waits on that event only. Slots (pinned doubles, an event each) are allocated in chunks on
// first need and reused once their reading is gone, so a training step allocates nothing.
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "tessera/ops/deferred_sum.h"

namespace tessera::ops::cuda {

// Queues on `stream` the copy of *device_value (read when the stream gets there) to the host.
std::shared_ptr<const PendingDouble> read_device_double_async(const double* device_value, cudaStream_t stream);

}  // namespace tessera::ops::cuda
