// One thread that formats and sends the SSE chunks of every OpenAI stream (so the engine thread
// only queues events), and polls watchers: paused streams waiting for their client to catch up.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace linfer::openai {

class Dispatcher {
 public:
  explicit Dispatcher(absl::Duration poll_period = absl::Milliseconds(20));
  ~Dispatcher();  // runs what is queued, then joins
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Thread-safe. Runs `fn` on the dispatcher thread, in order.
  void Post(std::function<void()> fn);
  // Thread-safe. Calls `poll` on the dispatcher thread every poll period until it returns false.
  void Watch(std::function<bool()> poll);

 private:
  void Run();
  const absl::Duration period_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<bool()>> watchers_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace linfer::openai
