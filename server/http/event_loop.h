// A libevent event_base run by one thread, with closures posted from any thread and a periodic
// tick. Everything that touches libevent objects runs on this thread.
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

struct event_base;
struct event;

namespace linfer {

class EventLoop {
 public:
  // Creates the base (libevent set up for threads) without starting the thread.
  static absl::StatusOr<std::shared_ptr<EventLoop>> Create();
  ~EventLoop();

  event_base* base() const { return base_; }
  // Starts the loop thread; `tick` runs on it every `period`.
  void Run(absl::Duration period, std::function<void()> tick);
  // Thread-safe. Queues `fn` to run on the loop thread; false once the loop is stopping.
  bool Post(std::function<void()> fn);
  bool OnLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // Stops accepting posts, runs what is queued, breaks the loop and joins its thread.
  void Stop();

 private:
  EventLoop() = default;
  static void OnWake(int, short, void* arg);
  static void OnTick(int, short, void* arg);
  void Drain();

  event_base* base_ = nullptr;
  event* wake_ = nullptr;
  event* tick_ = nullptr;
  std::function<void()> tick_fn_;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<std::function<void()>> posted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace linfer
