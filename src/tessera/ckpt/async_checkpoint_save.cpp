#include "tessera/ckpt/async_checkpoint_save.h"

#include <chrono>
#include <cstdlib>

#include "tessera/runtime/device_copy.h"

namespace tessera::ckpt {

AsyncCheckpointSave::~AsyncCheckpointSave() {
  if (in_flight_ && in_flight_->writer.joinable()) in_flight_->writer.join();
}

Tensor AsyncCheckpointSave::snapshot(InFlight& f, const Tensor& t) {
  if (!t.defined()) return t;
  auto buffer = std::make_unique<Buffer>(t.nbytes());
  Tensor copy = buffer->as_tensor(t.dtype(), t.shape());
  if (t.numel() > 0) copy_synchronous(t, copy);  // from the GPU: done on return
  f.buffers.push_back(std::move(buffer));
  return copy;
}

void AsyncCheckpointSave::start(const SaveRequest& request, Communicator& world) {
  TESSERA_CHECK(!pending(), "an asynchronous checkpoint save is already in flight (iteration ", iteration(), ")");
  in_flight_ = std::make_unique<InFlight>();
  InFlight& f = *in_flight_;
  f.request = request;
  for (TensorShard& shard : f.request.model) shard.local = snapshot(f, shard.local);
  if (request.optimizer) {
    f.optimizer = *request.optimizer;
    for (OptimizerSlice& slice : f.optimizer.slices) {
      slice.exp_avg = snapshot(f, slice.exp_avg);
      slice.exp_avg_sq = snapshot(f, slice.exp_avg_sq);
      slice.main_param = snapshot(f, slice.main_param);
    }
    f.request.optimizer = &f.optimizer;
  }
  try {
    f.prepared = prepare_save(f.request, world);
  } catch (...) {
    in_flight_.reset();
    throw;
  }
  f.writer = std::thread([&f] {
    try {
      write_save_files(f.request, f.prepared);
      // Tests: a writer still busy (files written, not committed) while training goes on.
      if (const char* pause = std::getenv("TESSERA_TEST_PAUSE_IN_ASYNC_WRITE_MS"); pause && *pause)
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(pause)));
    } catch (...) {
      f.failure = std::current_exception();
    }
    f.done.store(true, std::memory_order_release);
  });
}

std::optional<SaveResult> AsyncCheckpointSave::try_finish(Communicator& world) {
  TESSERA_CHECK(pending(), "no asynchronous checkpoint save is in flight");
  Buffer flag_buffer(sizeof(int32_t));
  Tensor flag = flag_buffer.as_tensor(DType::i32, {1});
  *flag.data_as<int32_t>() = in_flight_->done.load(std::memory_order_acquire) ? 1 : 0;
  world.all_reduce(flag, ReduceOp::min);
  if (*flag.data_as<int32_t>() == 0) return std::nullopt;
  return finish(world);
}

SaveResult AsyncCheckpointSave::finish(Communicator& world) {
  TESSERA_CHECK(pending(), "no asynchronous checkpoint save is in flight");
  InFlight& f = *in_flight_;
  if (f.writer.joinable()) f.writer.join();
  std::exception_ptr failure = f.failure;
  try {
    SaveResult result = finish_save(f.request, f.prepared, world, failure);
    in_flight_.reset();
    return result;
  } catch (...) {
    in_flight_.reset();
    throw;
  }
}

}  // namespace tessera::ckpt
