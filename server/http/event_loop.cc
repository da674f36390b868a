// EventLoop: event_base + a wake event activated from other threads + a periodic tick.
#include "server/http/event_loop.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>

#include <mutex>

namespace linfer {

absl::StatusOr<std::shared_ptr<EventLoop>> EventLoop::Create() {
  static std::once_flag threads_once;
  static int threads_status = 0;
  std::call_once(threads_once, [] { threads_status = evthread_use_pthreads(); });
  if (threads_status != 0) return absl::InternalError("libevent: no pthread support");
  std::shared_ptr<EventLoop> loop(new EventLoop());
  loop->base_ = event_base_new();
  if (loop->base_ == nullptr) return absl::InternalError("libevent: event_base_new failed");
  loop->wake_ = event_new(loop->base_, -1, EV_PERSIST, &EventLoop::OnWake, loop.get());
  loop->tick_ = event_new(loop->base_, -1, EV_PERSIST, &EventLoop::OnTick, loop.get());
  if (loop->wake_ == nullptr || loop->tick_ == nullptr) {
    return absl::InternalError("libevent: event_new failed");
  }
  event_add(loop->wake_, nullptr);
  return loop;
}

EventLoop::~EventLoop() {
  Stop();
  if (wake_ != nullptr) event_free(wake_);
  if (tick_ != nullptr) event_free(tick_);
  if (base_ != nullptr) event_base_free(base_);
}

void EventLoop::Run(absl::Duration period, std::function<void()> tick) {
  tick_fn_ = std::move(tick);
  const timeval tv = absl::ToTimeval(period);
  event_add(tick_, &tv);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "linfer-http");
    event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY);
    Drain();
  });
}

bool EventLoop::Post(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    posted_.push_back(std::move(fn));
  }
  event_active(wake_, EV_READ, 0);
  return true;
}

void EventLoop::Drain() {
  for (;;) {
    std::vector<std::function<void()>> batch;
    {
      absl::MutexLock lock(&mu_);
      batch.swap(posted_);
    }
    if (batch.empty()) return;
    for (auto& fn : batch) fn();
  }
}

void EventLoop::OnWake(int, short, void* arg) { static_cast<EventLoop*>(arg)->Drain(); }

void EventLoop::OnTick(int, short, void* arg) {
  EventLoop* loop = static_cast<EventLoop*>(arg);
  if (loop->tick_fn_) loop->tick_fn_();
}

void EventLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  if (thread_.joinable()) {
    event_base_loopbreak(base_);
    thread_.join();
  }
  Drain();
}

}  // namespace linfer
