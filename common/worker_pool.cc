// WorkerPool: a mutex-guarded deque and N threads.
#include "common/worker_pool.h"

#include <pthread.h>

namespace linfer {

WorkerPool::WorkerPool(int threads, size_t max_queued, std::string name) : max_queued_(max_queued) {
  for (int i = 0; i < (threads < 1 ? 1 : threads); ++i) {
    threads_.emplace_back([this] { Run(); });
    pthread_setname_np(threads_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool WorkerPool::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stop_ || queue_.size() >= max_queued_) return false;
  queue_.push_back(std::move(fn));
  return true;
}

size_t WorkerPool::queued() {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void WorkerPool::Run() {
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

}  // namespace linfer
