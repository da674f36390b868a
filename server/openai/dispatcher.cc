// Dispatcher.
#include "server/openai/dispatcher.h"

#include <pthread.h>

namespace linfer::openai {

Dispatcher::Dispatcher(absl::Duration poll_period)
    : period_(poll_period), thread_([this] { Run(); }) {
  pthread_setname_np(thread_.native_handle(), "linfer-sse");
}

Dispatcher::~Dispatcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void Dispatcher::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
}

void Dispatcher::Watch(std::function<bool()> poll) {
  absl::MutexLock lock(&mu_);
  watchers_.push_back(std::move(poll));
}

void Dispatcher::Run() {
  absl::Time next_poll = absl::Now() + period_;
  for (;;) {
    std::deque<std::function<void()>> batch;
    std::vector<std::function<bool()>> watchers;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      auto ready_or_watched = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty() || !watchers_.empty();
      };
      if (watchers_.empty()) {
        mu_.Await(absl::Condition(&ready_or_watched));
      } else {
        mu_.AwaitWithDeadline(absl::Condition(&ready), next_poll);
      }
      if (stop_ && queue_.empty()) return;
      batch.swap(queue_);
      if (absl::Now() >= next_poll) {
        watchers.swap(watchers_);
        next_poll = absl::Now() + period_;
      }
    }
    for (auto& fn : batch) fn();
    if (watchers.empty()) continue;
    std::vector<std::function<bool()>> keep;
    for (auto& w : watchers) {
      if (w()) keep.push_back(std::move(w));
    }
    absl::MutexLock lock(&mu_);
    for (auto& w : keep) watchers_.push_back(std::move(w));
  }
}

}  // namespace linfer::openai
