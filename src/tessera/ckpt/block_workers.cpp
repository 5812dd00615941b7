#include "tessera/ckpt/block_workers.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::ckpt {

namespace {

constexpr size_t kMaxWorkers = 4;  // page-cache copies stop scaling past a few cores

class BlockWorkers {
 public:
  BlockWorkers() : owner_(::getpid()) {
    const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    for (size_t i = 1; i < std::min(cores, kMaxWorkers); ++i) threads_.emplace_back([this, i] { serve(i); });
  }
  ~BlockWorkers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  size_t count() const { return threads_.size() + 1; }

  void run(size_t tasks, const std::function<void(size_t)>& task) {
    TESSERA_CHECK(tasks >= 1 && tasks <= count(), "run_on_block_workers: ", tasks, " tasks for ", count(), " threads");
    if (tasks == 1 || ::getpid() != owner_) {  // one task, or a forked child (the workers stayed in the parent)
      for (size_t t = 0; t < tasks; ++t) task(t);
      return;
    }
    std::lock_guard<std::mutex> one_at_a_time(run_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      tasks_ = tasks;
      pending_ = tasks - 1;
      ++generation_;
    }
    wake_.notify_all();
    task(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void serve(size_t index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(size_t)>* task = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (index >= tasks_) continue;  // this round needs fewer threads
        task = task_;
      }
      (*task)(index);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const pid_t owner_;
  std::vector<std::thread> threads_;
  std::mutex run_mutex_, mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* task_ = nullptr;
  size_t tasks_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

BlockWorkers& workers() {
  static BlockWorkers pool;
  return pool;
}

}  // namespace

size_t block_worker_count(size_t max_threads) { return std::min(max_threads, workers().count()); }

void run_on_block_workers(size_t tasks, const std::function<void(size_t)>& task) { workers().run(tasks, task); }

}  // namespace tessera::ckpt
