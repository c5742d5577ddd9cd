// The connection side of ladder's HTTP server: an httplib::Server that owns
// how its accepted connections are served, so that idle and slow clients
// cannot hold every thread, and so that a handler knows its client's socket.
//
// httplib accepts a connection and hands it to this class (its
// process_and_close_socket hook, run on the accept thread). From then on:
//   - A connection with no request in progress (a new one, or a keep-alive
//     one between requests) waits on one epoll thread, not on a pool thread:
//     idle connections cost a file descriptor each, not a thread. One that
//     stays idle for keep_alive_timeout is closed.
//   - When bytes arrive, one pool thread reads the request, runs its handler
//     (httplib's routing), writes the answer, and hands the connection back
//     to the epoll thread (or closes it: "Connection: close", HTTP/1.0, the
//     max_requests-th request, an error, or the server stopping).
//   - Reading a request, head and body, must finish within request_timeout
//     of its first byte: a client that trickles its request holds a pool
//     thread at most that long. A request whose first line is late is closed
//     unanswered; a later part gets the error handler's answer
//     (RequestTimedOut() tells it why), and then the connection closes.
//   - A request may take at most max_request_bytes from its connection: one
//     longer fails as it is read (RequestTooLarge() tells the error handler),
//     and then the connection closes.
//   - A write that cannot make progress for write_timeout fails (and with it
//     the request's answer).
//   - A request whose body has no certain end is refused before its body is
//     read, and then the connection closes (CheckBodyFraming).
// So the pool's threads are held only by requests being read (bounded by
// request_timeout) or being answered (the handlers' business).
//
// Threads: the accept loop (httplib's listen_after_bind, on the caller of
// Serve), one epoll thread and `threads` pool threads while listening. All
// are joined before listen_after_bind returns; stop() (any thread) closes
// the idle connections at once and lets requests in progress finish.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "httplib.h"

namespace ladder {

// Why a request cannot be read: the HTTP status to answer and a one-line
// message for the client.
struct Refusal {
  int status;
  std::string message;
};

struct ConnectionLimits {
  int threads = 64;                                    // requests read or answered at once (>= 1)
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle connection lifetime
  std::chrono::milliseconds request_timeout{10000};    // to read one request
  std::chrono::milliseconds write_timeout{5000};       // for one write to progress
  int max_requests = 100;                              // per connection
  // Bytes one request may take from its connection, head and body (0: no
  // limit). httplib checks a Content-Length against its payload limit but
  // reads a chunked body whole, however long; this bound holds for both.
  // A request past it fails as it is read (RequestTooLarge() tells the error
  // handler why), and then the connection closes.
  size_t max_request_bytes = 0;
};

class ConnectionServer : public httplib::Server {
 public:
  // Fails (InvalidArgument) on limits below 1, or (Internal) when the
  // epoll and eventfd descriptors cannot be made.
  static absl::StatusOr<std::unique_ptr<ConnectionServer>> Create(const ConnectionLimits& limits);
  ~ConnectionServer() override;

  // The listening socket (after bind_to_port), for adjusting its options.
  int listening_socket() const { return static_cast<int>(svr_sock_); }

 private:
  class Connection;
  class Queue;

  explicit ConnectionServer(const ConnectionLimits& limits);
  // Called by httplib on the accept thread for each accepted socket; takes
  // ownership of it and parks it.
  bool process_and_close_socket(socket_t sock) override;
  // Reads and answers one request of `c`, on a pool thread.
  void ServeRequest(std::shared_ptr<Connection> c);

  // The connection whose request this thread is serving, if any.
  static thread_local Connection* current_;
  friend std::optional<Refusal> CheckBodyFraming(const httplib::Request& req);
  friend int ConnectionSocket();
  friend bool RequestTimedOut();
  friend bool RequestTooLarge();

  const ConnectionLimits limits_;
  int epoll_ = -1;          // the idle connections' poller, and
  int wake_ = -1;           // an eventfd in it that wakes its thread
  Queue* queue_ = nullptr;  // httplib's task queue while listening; it owns it
};

// The socket of the connection whose request the calling thread is serving
// (in a handler or a response's content provider), or -1 on other threads.
// It stays open until the handler and its content provider have returned.
int ConnectionSocket();

// False once the client of `socket` has closed its end or the connection
// broke; true while it is open, and for -1 (nothing to watch). One poll(2),
// no waiting; any thread.
bool ConnectionAlive(int socket);

// True in a handler (normally the error handler) when the rest of the
// current request (headers or body) did not arrive within request_timeout.
bool RequestTimedOut();

// True in a handler (normally the error handler) when the current request
// was longer than ConnectionLimits::max_request_bytes.
bool RequestTooLarge();

// Where a request's body ends must be certain before any of it is read: the
// bytes after it are the connection's next request, and a proxy in front
// that read the head differently would pass on a request hidden in a body
// (RFC 9112, section 6). So a request may carry at most one of
// Content-Length (once, a decimal number) or Transfer-Encoding (once), and
// only the framings httplib reads. Refuses:
//   411 a POST, PUT or PATCH with neither (httplib would read until the
//       client closed, so the client would wait request_timeout for a 408);
//   400 both headers, either twice, a length that is not a number, a
//       Transfer-Encoding on another method, a body on GET, HEAD or OPTIONS;
//   501 a transfer coding other than chunked (the only one httplib reads).
// On a refusal the current connection closes after the answer, since what
// follows the head cannot be told apart from a next request. nullopt for a
// request that may be read. Call from the pre-routing handler (the head has
// been read, the body not yet), on the thread serving the request.
std::optional<Refusal> CheckBodyFraming(const httplib::Request& req);

}  // namespace ladder
