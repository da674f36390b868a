// A fixed pool of threads running posted closures in FIFO order, with a bounded queue. Used to
// keep slow work (JSON parsing, tokenization, template rendering) off I/O and callback threads.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace linfer {

class WorkerPool {
 public:
  // `threads` ≥ 1 workers; at most `max_queued` closures wait (Post returns false beyond it).
  WorkerPool(int threads, size_t max_queued, std::string name);
  ~WorkerPool();  // runs what is queued, then joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Thread-safe. False (and `fn` is dropped) when the queue is full or the pool is stopping.
  bool Post(std::function<void()> fn);
  size_t queued();

 private:
  void Run();
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  const size_t max_queued_;
  std::vector<std::thread> threads_;
};

}  // namespace linfer
