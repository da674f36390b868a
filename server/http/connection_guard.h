// ConnectionGuard: what libevent 2.1's evhttp cannot bound by itself — how many connections are
// open and how long a client may take to send a request. evhttp's idle timeout restarts on every
// byte, so a client that trickles a header byte every few seconds (slowloris) held its connection,
// its file descriptor and its buffers for ever, and enough of them would exhaust the process's
// descriptors (libevent's listener then spins on EMFILE).
//
// The guard sees every connection through the bufferevent it makes for evhttp
// (evhttp_set_bevcb), holds a reference to it so that the pointer stays valid after evhttp frees
// the connection (which clears its callbacks: that is how the guard tells a closed one), and
// watches its input buffer for the first byte of each request.
//   * Request deadline: a request must arrive whole (headers and body) within `request_timeout`
//     of its first byte, else the connection is closed.
//   * Input limit: a connection's input buffer holds at most `input_limit` bytes (evhttp reads
//     a client's bytes without bound while it writes an answer, and a chunked body's size line
//     has no length limit in evhttp: at the limit it rescanned the buffer for ever). A connection
//     that reaches it while nothing is being answered is closed at once, and so is one whose
//     chunked body's size line passes 4 KiB (RequestFraming follows every request's bytes as
//     evhttp frames them): evhttp scans the whole buffer for that line's end on every read, so
//     a line without end cost loop time quadratic in its length (≈ 20 s for 64 MiB).
//   * Send rate: an answer whose client reads it slower than `min_send_rate` bytes/s, measured
//     over `send_window` with output waiting for the client all the while, is dropped (streams
//     too). Without it a client that pipelines requests and reads a few bytes every few seconds
//     held its connection for ever (libevent's write timeout restarts on any progress), and a
//     connection writing an answer is never evicted: cap-many such clients paused the listener.
//   * Connection cap: a connection past `max_connections` closes the open connection that is
//     not being answered and has waited longest — idle keep-alive ones first, then the
//     unfinished request arriving slowest (bytes per second since its first byte, so a large
//     upload outlives clients that trickle a byte each) — so a legitimate client always gets in
//     while slow ones churn. When
//     every open connection is being answered, the listener stops accepting (new clients wait
//     in the kernel's backlog) until one closes.
// A connection is closed through `close` (the server's own drop: its records, then
// evhttp_connection_free), never from inside a libevent callback of that connection; its
// descriptor closes when the guard drops its reference. Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/http/request_framing.h"

struct bufferevent;
struct event;
struct event_base;
struct evbuffer;
struct evbuffer_cb_entry;
struct evbuffer_cb_info;
struct evconnlistener;
struct evhttp_connection;

namespace linfer {

struct ConnectionGuardOptions {
  size_t max_connections = 1024;
  absl::Duration request_timeout = absl::Seconds(120);
  // Bytes a connection's input buffer may hold: evhttp keeps a whole request there (a body with
  // a Content-Length until it is complete), and while it writes an answer it reads the client's
  // next bytes there with no bound of its own.
  size_t input_limit = size_t{80} << 20;
  // A request head (line, headers, trailers) the guard follows at most — more than evhttp takes
  // (it counts lines without their ends) — and the input limit of a connection past it.
  size_t head_limit = 320 << 10;
  size_t lost_input_limit = size_t{1} << 20;
  // The slowest a client may read what is written to it, bytes/s (0: any), and the window it is
  // measured over.
  int64_t min_send_rate = 1024;
  absl::Duration send_window = absl::Seconds(30);
};

class ConnectionGuard {
 public:
  ConnectionGuard(ConnectionGuardOptions options, evconnlistener* listener,
                  std::function<void(evhttp_connection*)> close)
      : options_(options), listener_(listener), close_(std::move(close)) {}
  ~ConnectionGuard();  // after evhttp_free: releases every bufferevent still held
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // evhttp_set_bevcb's callback (`guard` is this): a socket bufferevent for a new connection.
  static bufferevent* NewBufferevent(event_base* base, void* guard);

  // A whole request arrived on `bev`'s connection: its deadline ends.
  void RequestArrived(bufferevent* bev);
  // A handler will answer it later: the connection is busy (never timed out or evicted) until
  // Answered.
  void Answering(bufferevent* bev);
  // The answer is complete (handed to evhttp): the connection waits for its next request.
  void Answered(bufferevent* bev);
  // The answer just written is the connection's last (evhttp keeps a connection open after
  // answering CONNECT, whatever the answer says): what the client sent after it is dropped, and
  // the connection closes on the loop's next turn.
  void CloseAfterAnswer(bufferevent* bev);
  // Forgets closed connections, enforces the deadline, resumes accepting below the cap.
  void Tick(absl::Time now);

  size_t open() const { return open_; }                 // connections not yet seen closing
  int64_t timed_out() const { return timed_out_.n; }    // shut down for the request deadline
  int64_t evicted() const { return evicted_.n; }        // shut down to make room under the cap
  int64_t overflowed() const { return overflowed_.n; }  // closed at the input limit
  int64_t slow_readers() const { return slow_.n; }      // dropped under the send rate
  // A stream the server dropped itself (its client not reading: HttpServerImpl::Tick, which
  // logs it) counts among the slow readers.
  void CountDroppedReader() {
    ++slow_.n;
    ++slow_.logged;
  }
  // Bytes written to `bev`'s socket so far (-1: not a connection the guard watches).
  int64_t Sent(bufferevent* bev);
  bool paused() const { return paused_; }  // the listener is not accepting

 private:
  struct Watch {
    ConnectionGuard* guard = nullptr;
    bufferevent* bev = nullptr;
    evbuffer_cb_entry* on_input = nullptr;
    evbuffer_cb_entry* on_output = nullptr;
    int64_t sent = 0;  // bytes written to the socket from the output buffer
    // Since when output has waited for the client at every tick (infinite future: none waits),
    // and `sent` then.
    absl::Time stalled_since = absl::InfiniteFuture();
    int64_t sent_then = 0;
    absl::Time waiting_since;                           // accepted or last answered
    absl::Time request_since = absl::InfiniteFuture();  // a request's first byte, until whole
    int64_t request_bytes = 0;                          // of it received so far
    bool busy = false;                                  // a handler is answering
    bool shut = false;                                  // closed here
    bool close_after = false;                           // CloseAfterAnswer
    RequestFraming framing{{}};  // the request being read, as evhttp frames it
  };
  // Feeds `buffer`'s bytes from offset `from` on to w's framing.
  void Follow(Watch& w, evbuffer* buffer, size_t from);
  // A chunk-size line without end, or more unparsed input than any request takes.
  bool Overflowing(const Watch& w) const;
  static void OnInput(evbuffer* buffer, const evbuffer_cb_info* info, void* watch);
  static void OnOutput(evbuffer* buffer, const evbuffer_cb_info* info, void* watch);
  // Whether w's client has read too slowly over the last send window (and starts the next).
  bool ReadingTooSlowly(Watch& w, absl::Time now);
  static void OnReap(int, short, void* guard);
  void Reap();  // closes the connections at the input limit that nothing is answering
  // evhttp's connection, the argument of its callbacks on w's bufferevent; null once evhttp has
  // freed it (bufferevent_free clears them).
  static evhttp_connection* ConnectionOf(const Watch& w);
  static bool Closed(const Watch& w) { return ConnectionOf(w) == nullptr; }
  void Waiting(Watch& w);  // w waits for its next request from now
  bool Shut(Watch& w);     // closes w's connection; false when it was closed already
  void Release(bufferevent* bev, Watch& w);  // closes its descriptor, drops the reference
  void Sweep();                              // releases the connections evhttp has freed
  Watch* Victim();                           // the connection to close for a new one, or null
  bool MakeRoom();                           // shuts a victim down; false when none can go
  void Pause(absl::string_view why);         // stops accepting
  // Descriptors the guard may hold at once: the cap, and room for closed connections not yet
  // swept (each accept sweeps first).
  size_t DescriptorBudget() const { return options_.max_connections + 64; }
  Watch* Find(bufferevent* bev);

  ConnectionGuardOptions options_;
  evconnlistener* listener_;
  std::function<void(evhttp_connection*)> close_;
  event* reap_ = nullptr;  // made with the first connection; run at once by OnInput
  absl::flat_hash_map<bufferevent*, std::unique_ptr<Watch>> watches_;
  size_t open_ = 0;
  struct Tally {
    int64_t n = 0, logged = 0;  // connections closed for one reason; of them, logged
  };
  Tally timed_out_, evicted_, overflowed_, slow_;
  absl::Time last_log_ = absl::InfinitePast();
  bool paused_ = false;
};

}  // namespace linfer
