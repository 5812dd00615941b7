#include "tessera/ckpt/async_checkpoint_save.h"

#include <chrono>
#include <cstdlib>


namespace tessera::ckpt {

AsyncCheckpointSave::~AsyncCheckpointSave() {
  if (in_flight_ && in_flight_->writer.joinable()) in_flight_->writer.join();
}

template <typename F>
void AsyncCheckpointSave::for_each_tensor(SaveRequest& request, OptimizerState* optimizer, F&& f) {
  for (TensorShard& shard : request.model) f(shard.local);
  if (!optimizer) return;
  for (OptimizerSlice& slice : optimizer->slices) {
    f(slice.exp_avg);
    f(slice.exp_avg_sq);
    f(slice.main_param);
  }
}

void AsyncCheckpointSave::reserve(const SaveRequest& request) {
  TESSERA_CHECK(!pending(), "reserve: an asynchronous checkpoint save is in flight (iteration ", iteration(), ")");
  SaveRequest copy = request;
  OptimizerState optimizer = request.optimizer ? *request.optimizer : OptimizerState{};
  staging_.begin();
  for_each_tensor(copy, request.optimizer ? &optimizer : nullptr, [&](Tensor& t) { staging_.reserve(t); });
  staging_.end();
}

void AsyncCheckpointSave::start(const SaveRequest& request, Communicator& world) {
  TESSERA_CHECK(!pending(), "an asynchronous checkpoint save is already in flight (iteration ", iteration(), ")");
  in_flight_ = std::make_unique<InFlight>();
  InFlight& f = *in_flight_;
  f.request = request;
  if (request.optimizer) {
    f.optimizer = *request.optimizer;
    f.request.optimizer = &f.optimizer;
  }
  // The previous save's writer is done (!pending()): its buffers are free for this snapshot.
  staging_.begin();
  for_each_tensor(f.request, request.optimizer ? &f.optimizer : nullptr, [&](Tensor& t) { t = staging_.copy(t); });
  staging_.end();
  try {
    f.prepared = prepare_save(f.request, world);
  } catch (...) {
    in_flight_.reset();
    throw;
  }
  f.writer = std::thread([&f, this] {
    try {
      staging_.wait_host();  // the snapshot's device-to-host copies are done
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
