// ConnectionGuard (connection_guard.h). Lifetimes: evhttp frees a connection's bufferevent with
// bufferevent_free, which clears its callbacks; the reference taken here keeps the object, and
// its read/write events stay registered (even queued to run in the same loop pass) until Sweep
// releases it. So the bufferevent is made with BEV_OPT_CLOSE_ON_FREE: evhttp then only shuts the
// socket's write side, and the descriptor is closed with the last reference — no stale event can
// ever touch a descriptor number that another thread has since been given.
#include "server/http/connection_guard.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace linfer {

ConnectionGuard::~ConnectionGuard() {
  for (auto& [bev, w] : watches_) {
    evbuffer_remove_cb_entry(bufferevent_get_input(bev), w->on_input);
    bufferevent_decref(bev);
  }
}

bufferevent* ConnectionGuard::NewBufferevent(event_base* base, void* guard) {
  auto* g = static_cast<ConnectionGuard*>(guard);
  g->Sweep();
  bufferevent* bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (bev == nullptr) return nullptr;  // evhttp then tries its own (unwatched)
  // While evhttp writes an answer it keeps reading the client's bytes, with no read callback and
  // no bound: past the limit the socket is left unread (the kernel's buffers push back).
  bufferevent_setwatermark(bev, EV_READ, 0, g->options_.input_limit);
  if (g->open_ >= g->options_.max_connections && !g->MakeRoom()) g->Pause();
  auto w = std::make_unique<Watch>();
  w->bev = bev;
  w->waiting_since = absl::Now();
  w->on_input = evbuffer_add_cb(bufferevent_get_input(bev), &ConnectionGuard::OnInput, w.get());
  bufferevent_incref(bev);
  g->watches_.emplace(bev, std::move(w));
  ++g->open_;
  return bev;
}

void ConnectionGuard::OnInput(evbuffer*, const evbuffer_cb_info* info, void* watch) {
  auto* w = static_cast<Watch*>(watch);
  if (info->n_added > 0 && !w->busy && w->request_since == absl::InfiniteFuture()) {
    w->request_since = absl::Now();
  }
}

bool ConnectionGuard::Closed(const Watch& w) {
  bufferevent_data_cb read = nullptr, write = nullptr;
  bufferevent_event_cb event = nullptr;
  void* arg = nullptr;
  bufferevent_getcb(w.bev, &read, &write, &event, &arg);
  return read == nullptr && write == nullptr && event == nullptr;  // bufferevent_free cleared them
}

void ConnectionGuard::Sweep() {
  std::vector<bufferevent*> closed;
  for (auto& [bev, w] : watches_) {
    if (Closed(*w)) closed.push_back(bev);
  }
  for (bufferevent* bev : closed) {
    auto it = watches_.find(bev);
    if (!it->second->shut) --open_;
    evbuffer_remove_cb_entry(bufferevent_get_input(bev), it->second->on_input);
    watches_.erase(it);
    bufferevent_decref(bev);  // the last reference: libevent deletes its events and frees it
  }
}

ConnectionGuard::Watch* ConnectionGuard::Find(bufferevent* bev) {
  auto it = watches_.find(bev);
  return it == watches_.end() ? nullptr : it->second.get();
}

void ConnectionGuard::Shut(Watch& w) {
  if (w.shut) return;
  w.shut = true;
  --open_;
  const int fd = bufferevent_getfd(w.bev);
  // The read side only: evhttp reads EOF and frees the connection. Shutting the write side too
  // would make evhttp's answer to a request already in the kernel's buffer raise EPIPE.
  if (fd >= 0) shutdown(fd, SHUT_RD);
}

ConnectionGuard::Watch* ConnectionGuard::Victim() {
  Watch* idle = nullptr;
  Watch* slowest = nullptr;
  for (auto& [bev, w] : watches_) {
    // A connection still writing an answer out (the handler is done with it) is not idle.
    if (w->shut || w->busy || Closed(*w) || evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
      continue;
    }
    if (w->request_since == absl::InfiniteFuture()) {
      if (idle == nullptr || w->waiting_since < idle->waiting_since) idle = w.get();
    } else if (slowest == nullptr || w->request_since < slowest->request_since) {
      slowest = w.get();
    }
  }
  return idle != nullptr ? idle : slowest;
}

bool ConnectionGuard::MakeRoom() {
  Watch* v = Victim();
  if (v == nullptr) return false;
  Shut(*v);
  ++evicted_;
  return true;
}

void ConnectionGuard::Pause() {
  if (paused_ || listener_ == nullptr) return;
  paused_ = true;
  evconnlistener_disable(listener_);
  Log(LogLevel::kWarning, absl::StrCat("HTTP: ", open_,
                                       " connections open (the cap, --http_max_connections), each "
                                       "being answered: accepting no more until one closes"));
}

void ConnectionGuard::RequestArrived(bufferevent* bev) {
  Watch* w = Find(bev);
  if (w == nullptr) return;
  // What is left in the buffer is the next (pipelined) request: its clock starts now.
  w->request_since =
      evbuffer_get_length(bufferevent_get_input(bev)) > 0 ? absl::Now() : absl::InfiniteFuture();
}

void ConnectionGuard::Answering(bufferevent* bev) {
  if (Watch* w = Find(bev)) w->busy = true;
}

void ConnectionGuard::Answered(bufferevent* bev) {
  Watch* w = Find(bev);
  if (w == nullptr) return;
  w->busy = false;
  w->waiting_since = absl::Now();
  // A pipelined next request may already be here: its clock starts now.
  if (evbuffer_get_length(bufferevent_get_input(bev)) > 0) w->request_since = w->waiting_since;
}

void ConnectionGuard::Tick(absl::Time now) {
  Sweep();
  for (auto& [bev, w] : watches_) {
    // Not while an answer is still being written out: the client reading slowly is evhttp's
    // write timeout's business.
    if (w->shut || w->busy || w->request_since == absl::InfiniteFuture() ||
        evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
      continue;
    }
    if (now - w->request_since > options_.request_timeout) {
      Shut(*w);
      ++timed_out_;
    }
  }
  if (paused_ && (open_ < options_.max_connections || Victim() != nullptr)) {
    paused_ = false;
    evconnlistener_enable(listener_);
  }
  if ((timed_out_ != logged_timed_out_ || evicted_ != logged_evicted_) &&
      now - last_log_ >= absl::Seconds(10)) {
    std::vector<std::string> what;
    if (timed_out_ > logged_timed_out_) {
      what.push_back(absl::StrCat(timed_out_ - logged_timed_out_,
                                  " whose request took longer than ",
                                  absl::FormatDuration(options_.request_timeout), " to arrive"));
    }
    if (evicted_ > logged_evicted_) {
      what.push_back(absl::StrCat(evicted_ - logged_evicted_,
                                  " waiting for a request, to make room under the cap of ",
                                  options_.max_connections));
    }
    Log(LogLevel::kWarning, absl::StrCat("HTTP: closed connections: ", absl::StrJoin(what, "; "),
                                         " (", open_, " open)"));
    logged_timed_out_ = timed_out_;
    logged_evicted_ = evicted_;
    last_log_ = now;
  }
}

}  // namespace linfer
