#pragma once
// A few threads kept for the life of the process that share the blocks of one large checkpoint
// tensor with the calling thread (h5_verified_read). Starting a thread per tensor costs about as much
// as reading a 1 MiB block on a virtual machine, and a checkpoint has hundreds of tensors.
#include <cstddef>
#include <functional>

namespace tessera::ckpt {

// The number of threads run_on_block_workers can use, the caller included (the machine's cores, at
// most max_threads).
size_t block_worker_count(size_t max_threads);

// Calls task(t) for t in [0, tasks) on up to `tasks` threads, t = 0 on the calling thread, and returns
// when all have returned. tasks must not exceed block_worker_count(). Exceptions are the task's to
// catch. Calls from several threads at once are serialised.
void run_on_block_workers(size_t tasks, const std::function<void(size_t)>& task);

}  // namespace tessera::ckpt
