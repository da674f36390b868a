// ConnectionGuard (connection_guard.h). Lifetimes: evhttp frees a connection's bufferevent with
// bufferevent_free, which clears its callbacks; the reference taken here keeps the object, and
// its read/write events stay registered (even queued to run in the same loop pass) until Sweep
// releases it. So the bufferevent is made with BEV_OPT_CLOSE_ON_FREE: evhttp then only shuts the
// socket's write side, and the descriptor stays open until Release deletes the events and closes
// it — no stale event can touch a descriptor number that another thread has since been given.
#include "server/http/connection_guard.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace linfer {

ConnectionGuard::~ConnectionGuard() {
  if (reap_ != nullptr) event_free(reap_);
  for (auto& [bev, w] : watches_) Release(bev, *w);
}

void ConnectionGuard::Release(bufferevent* bev, Watch& w) {
  evbuffer_remove_cb_entry(bufferevent_get_input(bev), w.on_input);
  evbuffer_remove_cb_entry(bufferevent_get_output(bev), w.on_output);
  // The descriptor closes now, not when libevent's deferred finalizer runs: inside one listener
  // callback (a burst of accepts) those would pile up.
  if (const int fd = bufferevent_getfd(bev); fd >= 0) {
    bufferevent_setfd(bev, -1);  // deletes its events
    close(fd);
  }
  bufferevent_decref(bev);  // the last reference: libevent frees it
}

bufferevent* ConnectionGuard::NewBufferevent(event_base* base, void* guard) {
  auto* g = static_cast<ConnectionGuard*>(guard);
  if (g->reap_ == nullptr) g->reap_ = evtimer_new(base, &ConnectionGuard::OnReap, g);
  g->Sweep();
  bufferevent* bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (bev == nullptr) return nullptr;  // evhttp then tries its own (unwatched)
  // While evhttp writes an answer it keeps reading the client's bytes, with no read callback and
  // no bound: past the limit the socket is left unread (the kernel's buffers push back). Reaching
  // it while no answer is being written is Reap's.
  bufferevent_setwatermark(bev, EV_READ, 0, g->options_.input_limit);
  // At the cap: room is made by closing a connection that waits for a request; when none does,
  // this one (already accepted) is the last until one closes.
  const bool full = g->open_ >= g->options_.max_connections && !g->MakeRoom();
  // Descriptors still held (closed connections not yet swept) count too: a burst of accepts must
  // not run the process out of them (libevent's listener would spin on EMFILE).
  if (g->watches_.size() + 1 >= g->DescriptorBudget()) g->Pause("descriptors still closing");
  auto w = std::make_unique<Watch>();
  w->guard = g;
  w->bev = bev;
  w->waiting_since = absl::Now();
  w->framing = RequestFraming({.head_bytes = g->options_.head_limit});
  w->on_input = evbuffer_add_cb(bufferevent_get_input(bev), &ConnectionGuard::OnInput, w.get());
  w->on_output = evbuffer_add_cb(bufferevent_get_output(bev), &ConnectionGuard::OnOutput, w.get());
  bufferevent_incref(bev);
  g->watches_.emplace(bev, std::move(w));
  ++g->open_;
  if (full) g->Pause("each being answered");  // the log line counts this one
  return bev;
}

void ConnectionGuard::OnInput(evbuffer* buffer, const evbuffer_cb_info* info, void* watch) {
  auto* w = static_cast<Watch*>(watch);
  if (info->n_added == 0) return;
  if (Closed(*w)) {  // evhttp has freed it; until Sweep releases it, read nothing more
    bufferevent_disable(w->bev, EV_READ);
    return;
  }
  ConnectionGuard* g = w->guard;
  // A socket's input only grows at its end: the new bytes are the last n_added. Followed even
  // while busy (evhttp reads the next request's bytes while it writes an answer).
  g->Follow(*w, buffer, evbuffer_get_length(buffer) - info->n_added);
  if (w->busy) return;
  if (w->request_since == absl::InfiniteFuture()) w->request_since = absl::Now();
  w->request_bytes += static_cast<int64_t>(info->n_added);
  // Not from here (inside the connection's own read): on the loop's next turn.
  if (g->Overflowing(*w) && g->reap_ != nullptr) event_active(g->reap_, EV_TIMEOUT, 0);
}

void ConnectionGuard::OnOutput(evbuffer*, const evbuffer_cb_info* info, void* watch) {
  static_cast<Watch*>(watch)->sent += static_cast<int64_t>(info->n_deleted);
}

bool ConnectionGuard::ReadingTooSlowly(Watch& w, absl::Time now) {
  if (options_.min_send_rate <= 0 || evbuffer_get_length(bufferevent_get_output(w.bev)) == 0) {
    w.stalled_since = absl::InfiniteFuture();  // the client has everything written so far
    return false;
  }
  if (w.stalled_since == absl::InfiniteFuture()) {
    w.stalled_since = now;
    w.sent_then = w.sent;
    return false;
  }
  const absl::Duration waited = now - w.stalled_since;
  if (waited < options_.send_window) return false;
  if (static_cast<double>(w.sent - w.sent_then) <
      static_cast<double>(options_.min_send_rate) * absl::ToDoubleSeconds(waited)) {
    return true;
  }
  w.stalled_since = now;
  w.sent_then = w.sent;
  return false;
}

void ConnectionGuard::Follow(Watch& w, evbuffer* buffer, size_t from) {
  evbuffer_ptr at;
  if (evbuffer_ptr_set(buffer, &at, from, EVBUFFER_PTR_SET) != 0) return;
  const int n = evbuffer_peek(buffer, -1, &at, nullptr, 0);
  if (n <= 0) return;
  std::vector<evbuffer_iovec> extents(static_cast<size_t>(n));
  evbuffer_peek(buffer, -1, &at, extents.data(), n);
  for (const evbuffer_iovec& e : extents) {
    w.framing.Feed(absl::string_view(static_cast<const char*>(e.iov_base), e.iov_len));
  }
}

bool ConnectionGuard::Overflowing(const Watch& w) const {
  if (w.framing.must_close()) return true;
  const size_t limit = w.framing.lost() ? options_.lost_input_limit : options_.input_limit;
  return evbuffer_get_length(bufferevent_get_input(w.bev)) >= limit;
}

void ConnectionGuard::OnReap(int, short, void* guard) {
  static_cast<ConnectionGuard*>(guard)->Reap();
}

void ConnectionGuard::Reap() {
  std::vector<Watch*> full;
  for (auto& [bev, w] : watches_) {
    if (!w->shut && !w->busy && !Closed(*w) &&
        evbuffer_get_length(bufferevent_get_output(bev)) == 0 &&
        (w->close_after || Overflowing(*w))) {
      full.push_back(w.get());
    }
  }
  for (Watch* w : full) {
    const bool last_answer = w->close_after;
    if (Shut(*w) && !last_answer) ++overflowed_.n;
  }
}

evhttp_connection* ConnectionGuard::ConnectionOf(const Watch& w) {
  bufferevent_data_cb read = nullptr, write = nullptr;
  bufferevent_event_cb event = nullptr;
  void* conn = nullptr;
  bufferevent_getcb(w.bev, &read, &write, &event, &conn);
  return static_cast<evhttp_connection*>(conn);
}

void ConnectionGuard::Sweep() {
  std::vector<bufferevent*> closed;
  for (auto& [bev, w] : watches_) {
    if (Closed(*w)) closed.push_back(bev);
  }
  for (bufferevent* bev : closed) {
    auto it = watches_.find(bev);
    if (!it->second->shut) --open_;
    Release(bev, *it->second);
    watches_.erase(it);
  }
}

ConnectionGuard::Watch* ConnectionGuard::Find(bufferevent* bev) {
  auto it = watches_.find(bev);
  return it == watches_.end() ? nullptr : it->second.get();
}

bool ConnectionGuard::Shut(Watch& w) {
  evhttp_connection* conn = w.shut ? nullptr : ConnectionOf(w);
  if (conn == nullptr) return false;
  w.shut = true;
  --open_;
  close_(conn);
  return true;
}

ConnectionGuard::Watch* ConnectionGuard::Victim() {
  const absl::Time now = absl::Now();
  // A partial request's arrival rate, bytes/s since its first byte (at least a second: a
  // request just begun is not judged on its first bytes' timing).
  const auto rate = [now](const Watch& w) {
    return static_cast<double>(w.request_bytes) /
           std::max(1.0, absl::ToDoubleSeconds(now - w.request_since));
  };
  Watch* idle = nullptr;
  Watch* slowest = nullptr;
  double slowest_rate = 0.0;
  for (auto& [bev, w] : watches_) {
    // A connection still writing an answer out (the handler is done with it) is not idle.
    if (w->shut || w->busy || Closed(*w) || evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
      continue;
    }
    if (w->request_since == absl::InfiniteFuture()) {
      if (idle == nullptr || w->waiting_since < idle->waiting_since) idle = w.get();
    } else if (const double r = rate(*w);
               slowest == nullptr || r < slowest_rate ||
               (r == slowest_rate && w->request_since < slowest->request_since)) {
      slowest = w.get();
      slowest_rate = r;
    }
  }
  return idle != nullptr ? idle : slowest;
}

bool ConnectionGuard::MakeRoom() {
  Watch* v = Victim();
  if (v == nullptr) return false;
  evicted_.n += Shut(*v);
  return true;
}

void ConnectionGuard::Pause(absl::string_view why) {
  if (paused_ || listener_ == nullptr) return;
  paused_ = true;
  evconnlistener_disable(listener_);
  Log(LogLevel::kWarning,
      absl::StrCat("HTTP: ", open_, " connections open (cap ", options_.max_connections,
                   ", --http_max_connections), ", why, ": accepting no more until one closes"));
}

void ConnectionGuard::Waiting(Watch& w) {
  w.waiting_since = absl::Now();
  // What is left in the buffer is the next (pipelined) request: its clock starts now.
  const size_t left = evbuffer_get_length(bufferevent_get_input(w.bev));
  w.request_since = left > 0 ? w.waiting_since : absl::InfiniteFuture();
  w.request_bytes = static_cast<int64_t>(left);
}

void ConnectionGuard::RequestArrived(bufferevent* bev) {
  Watch* w = Find(bev);
  if (w == nullptr) return;
  Waiting(*w);
  // The next request's framing is followed from what evhttp left in the buffer.
  w->framing.Restart();
  Follow(*w, bufferevent_get_input(bev), 0);
}

void ConnectionGuard::CloseAfterAnswer(bufferevent* bev) {
  Watch* w = Find(bev);
  if (w == nullptr) return;
  w->close_after = true;
  evbuffer* in = bufferevent_get_input(bev);
  evbuffer_drain(in, evbuffer_get_length(in));
  if (reap_ != nullptr) event_active(reap_, EV_TIMEOUT, 0);
}

int64_t ConnectionGuard::Sent(bufferevent* bev) {
  const Watch* w = Find(bev);
  return w == nullptr ? -1 : w->sent;
}

void ConnectionGuard::Answering(bufferevent* bev) {
  if (Watch* w = Find(bev)) w->busy = true;
}

void ConnectionGuard::Answered(bufferevent* bev) {
  Watch* w = Find(bev);
  if (w == nullptr) return;
  w->busy = false;
  Waiting(*w);
}

void ConnectionGuard::Tick(absl::Time now) {
  Sweep();
  Reap();  // also those whose buffer was full before nothing was answered any more
  for (auto& [bev, w] : watches_) {
    if (w->shut || Closed(*w)) continue;
    if (ReadingTooSlowly(*w, now)) {
      slow_.n += Shut(*w);
      continue;
    }
    // Not while an answer is still being written out: the client reading slowly is the send
    // rate's business.
    if (w->busy || w->request_since == absl::InfiniteFuture() ||
        evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
      continue;
    }
    if (now - w->request_since > options_.request_timeout) timed_out_.n += Shut(*w);
  }
  if (paused_ && watches_.size() + 1 < DescriptorBudget() &&
      (open_ < options_.max_connections || Victim() != nullptr)) {
    paused_ = false;
    evconnlistener_enable(listener_);
  }
  if (now - last_log_ < absl::Seconds(10)) return;
  // What was closed since the last log line, by reason.
  std::vector<std::string> what;
  const std::pair<Tally*, std::string> tallies[] = {
      {&timed_out_, absl::StrCat(" whose request took longer than ",
                                 absl::FormatDuration(options_.request_timeout), " to arrive")},
      {&evicted_, absl::StrCat(" waiting for a request, to make room under the cap of ",
                               options_.max_connections)},
      {&overflowed_, absl::StrCat(" whose unparsed input reached ", options_.input_limit,
                                  " bytes or a chunk-size line without end")},
      {&slow_, absl::StrCat(" whose client read its answer slower than ", options_.min_send_rate,
                            " bytes/s over ", absl::FormatDuration(options_.send_window))}};
  for (const auto& [tally, why] : tallies) {
    if (tally->n > tally->logged) what.push_back(absl::StrCat(tally->n - tally->logged, why));
    tally->logged = tally->n;
  }
  if (what.empty()) return;
  Log(LogLevel::kWarning,
      absl::StrCat("HTTP: closed connections: ", absl::StrJoin(what, "; "), " (", open_, " open)"));
  last_log_ = now;
}

}  // namespace linfer
