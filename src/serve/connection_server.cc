#include "src/serve/connection_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ladder {

using Clock = std::chrono::steady_clock;

// One accepted connection, as the Stream httplib reads requests from and
// writes answers to. Reads are buffered (httplib reads request heads a byte
// at a time) and bounded by the current request's deadline; writes by
// write_timeout. Closes its socket when the last owner lets go.
class ConnectionServer::Connection : public httplib::Stream {
 public:
  Connection(int fd, std::chrono::milliseconds write_timeout, size_t max_request_bytes)
      : fd_(fd), write_timeout_(write_timeout), max_request_bytes_(max_request_bytes) {}
  ~Connection() override { close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Starts a request: its reads must be done by `deadline`.
  void BeginRequest(Clock::time_point deadline) {
    read_deadline_ = deadline;
    timed_out_ = false;
    request_bytes_ = 0;
    ++requests_;
  }
  int requests() const { return requests_; }
  bool timed_out() const { return timed_out_; }
  // This request asked for more than max_request_bytes.
  bool too_large() const { return too_large_; }
  // The connection closes after this request's answer.
  void CloseAfterRequest() { close_after_ = true; }
  bool close_after() const { return close_after_; }
  // Bytes read but not yet consumed (a pipelined next request).
  bool buffered() const { return read_off_ < read_buf_.size(); }

  bool is_readable() const override { return buffered() || Wait(POLLIN, read_deadline_); }
  bool is_writable() const override { return Wait(POLLOUT, Clock::now() + write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if (!Wait(POLLIN, read_deadline_)) {
        timed_out_ = true;
        return -1;
      }
      read_buf_.resize(kReadChunk);
      const ssize_t n = recv(fd_, read_buf_.data(), read_buf_.size(), 0);
      read_buf_.resize(n > 0 ? static_cast<size_t>(n) : 0);
      read_off_ = 0;
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, read_buf_.size() - read_off_);
    if (max_request_bytes_ > 0 && request_bytes_ + n > max_request_bytes_) {
      too_large_ = true;
      return -1;
    }
    std::memcpy(ptr, read_buf_.data() + read_off_, n);
    read_off_ += n;
    request_bytes_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;  // the caller retries
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  static constexpr size_t kReadChunk = 16 * 1024;

  // Waits until the socket is ready for `events` or `deadline` passes.
  bool Wait(short events, Clock::time_point deadline) const {
    for (;;) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, events, 0};
      const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
      if (r > 0) return true;  // ready, or an error the next call reports
      if (r < 0 && errno != EINTR) return false;
    }
  }

  // "host", port of one end, as httplib writes Request::remote_addr.
  void Address(int (*name)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (name(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
        getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), serv,
                    sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }

  const int fd_;
  const std::chrono::milliseconds write_timeout_;
  const size_t max_request_bytes_;
  size_t request_bytes_ = 0;  // taken by the current request
  bool too_large_ = false;    // sticky: the connection closes after it
  bool close_after_ = false;  // sticky: set by CloseAfterRequest
  std::string read_buf_;
  size_t read_off_ = 0;
  Clock::time_point read_deadline_;
  bool timed_out_ = false;
  int requests_ = 0;
};

// httplib's task queue for one listen: the pool that serves requests, and
// the epoll thread that holds connections between requests.
class ConnectionServer::Queue : public httplib::TaskQueue {
 public:
  explicit Queue(ConnectionServer* server)
      : server_(server),
        keep_alive_(server->limits_.keep_alive_timeout),
        pool_(static_cast<size_t>(server->limits_.threads)),
        epoll_(server->epoll_),
        wake_(server->wake_) {
    watcher_ = std::thread([this] { Watch(); });
  }

  // httplib's only task is process_and_close_socket for an accepted socket,
  // which parks it without blocking: it runs on the accept thread, so a busy
  // pool does not delay accepting.
  void enqueue(std::function<void()> fn) override { fn(); }

  // Closes the idle connections, then lets the pool finish its tasks (their
  // connections close instead of coming back: Park refuses them).
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      idle_.clear();
    }
    Wake();
    watcher_.join();
    pool_.shutdown();
  }

  // Holds `c` until its next request arrives (then serves it on the pool)
  // or keep_alive passes (then closes it). Any thread.
  void Park(std::shared_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;  // closes
    if (c->buffered()) {    // the next request is already here
      Serve(std::move(c));
      return;
    }
    const int fd = c->socket();
    const uint64_t seq = ++seq_;
    const Clock::time_point deadline = Clock::now() + keep_alive_;
    idle_[fd] = Idle{std::move(c), seq};
    const bool was_empty = expiry_.empty();
    expiry_.push_back(Expiry{deadline, fd, seq});
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.fd = fd;
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &e) != 0) {
      idle_.erase(fd);  // cannot be watched: closes
      return;
    }
    if (was_empty) Wake();  // the watcher may be waiting without a deadline
  }

 private:
  struct Idle {
    std::shared_ptr<Connection> connection;
    uint64_t seq = 0;
  };
  // Parked connections in the order they expire (all wait keep_alive_), so
  // the front is always the next to expire; entries for connections that
  // woke up since are stale (their seq differs) and skipped.
  struct Expiry {
    Clock::time_point deadline;
    int fd = -1;
    uint64_t seq = 0;
  };

  void Serve(std::shared_ptr<Connection> c) {
    pool_.enqueue(
        [server = server_, c = std::move(c)]() mutable { server->ServeRequest(std::move(c)); });
  }

  void Wake() {
    const uint64_t one = 1;
    if (::write(wake_, &one, sizeof(one)) < 0) {
    }  // already signalled (the counter is full): nothing lost
  }

  // Takes `fd` out of the idle set (the caller holds mu_).
  std::shared_ptr<Connection> Unpark(int fd) {
    auto it = idle_.find(fd);
    if (it == idle_.end()) return nullptr;
    std::shared_ptr<Connection> c = std::move(it->second.connection);
    idle_.erase(it);
    epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    return c;
  }

  void Watch() {
    epoll_event events[64];
    for (;;) {
      int timeout = -1;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        if (!expiry_.empty()) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                                expiry_.front().deadline - Clock::now())
                                .count();
          timeout = static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1 << 30));
        }
      }
      const int n = epoll_wait(epoll_, events, 64, timeout);
      std::vector<std::shared_ptr<Connection>> ready;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (int i = 0; i < n; ++i) {
          if (events[i].data.fd == wake_) {
            uint64_t count;
            if (::read(wake_, &count, sizeof(count)) < 0) {
            }  // nothing pending: fine
            continue;
          }
          if (auto c = Unpark(events[i].data.fd)) ready.push_back(std::move(c));
        }
        const Clock::time_point now = Clock::now();
        while (!expiry_.empty() && expiry_.front().deadline <= now) {
          const Expiry e = expiry_.front();
          expiry_.pop_front();
          auto it = idle_.find(e.fd);
          if (it != idle_.end() && it->second.seq == e.seq) Unpark(e.fd);  // closes
        }
      }
      for (auto& c : ready) Serve(std::move(c));
    }
  }

  ConnectionServer* const server_;
  const std::chrono::milliseconds keep_alive_;
  httplib::ThreadPool pool_;
  const int epoll_;
  const int wake_;
  std::thread watcher_;
  std::mutex mu_;
  bool stopping_ = false;
  uint64_t seq_ = 0;
  std::unordered_map<int, Idle> idle_;
  std::deque<Expiry> expiry_;
};

thread_local ConnectionServer::Connection* ConnectionServer::current_ = nullptr;

absl::StatusOr<std::unique_ptr<ConnectionServer>> ConnectionServer::Create(
    const ConnectionLimits& limits) {
  if (limits.threads < 1 || limits.max_requests < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads and requests per connection must be >= 1, got ", limits.threads,
                     " and ", limits.max_requests));
  }
  if (limits.keep_alive_timeout.count() < 1 || limits.request_timeout.count() < 1 ||
      limits.write_timeout.count() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the keep-alive, request and write timeouts must be >= 1 ms, got ",
                     limits.keep_alive_timeout.count(), ", ", limits.request_timeout.count(),
                     " and ", limits.write_timeout.count()));
  }
  std::unique_ptr<ConnectionServer> s(new ConnectionServer(limits));
  s->epoll_ = epoll_create1(EPOLL_CLOEXEC);
  s->wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = s->wake_;
  if (s->epoll_ < 0 || s->wake_ < 0 || epoll_ctl(s->epoll_, EPOLL_CTL_ADD, s->wake_, &e) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot set up the connection poller: ", std::strerror(errno)));
  }
  return s;
}

ConnectionServer::ConnectionServer(const ConnectionLimits& limits) : limits_(limits) {
  new_task_queue = [this] {
    queue_ = new Queue(this);
    return queue_;
  };
  // What the Keep-Alive header of each answer promises.
  set_keep_alive_max_count(static_cast<size_t>(limits_.max_requests));
  set_keep_alive_timeout(std::max<time_t>(
      1, std::chrono::ceil<std::chrono::seconds>(limits_.keep_alive_timeout).count()));
}

ConnectionServer::~ConnectionServer() {
  if (epoll_ >= 0) close(epoll_);
  if (wake_ >= 0) close(wake_);
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  // The first request is awaited off the pool, like the next ones.
  queue_->Park(
      std::make_shared<Connection>(sock, limits_.write_timeout, limits_.max_request_bytes));
  return true;
}

void ConnectionServer::ServeRequest(std::shared_ptr<Connection> c) {
  c->BeginRequest(Clock::now() + limits_.request_timeout);
  const bool last = c->requests() >= limits_.max_requests || svr_sock_ == INVALID_SOCKET;
  bool closed = false;
  current_ = c.get();
  const bool ok = process_request(*c, last, closed, [](httplib::Request&) {});
  current_ = nullptr;
  if (ok && !closed && !last && !c->timed_out() && !c->too_large() && !c->close_after()) {
    queue_->Park(std::move(c));
  }
}

namespace {

// CheckBodyFraming's rules. httplib reads a body for POST, PUT and PATCH
// (by Content-Length, or chunked, or else until the client closes), for
// DELETE only by Content-Length, and never for other methods.
std::optional<Refusal> FramingRefusal(const httplib::Request& req) {
  const std::string& m = req.method;
  const bool body_method = m == "POST" || m == "PUT" || m == "PATCH" || m == "PRI";
  const size_t lengths = req.get_header_value_count("Content-Length");
  const size_t codings = req.get_header_value_count("Transfer-Encoding");
  if (lengths > 0 && codings > 0) {
    return Refusal{400, "the request has both Content-Length and Transfer-Encoding"};
  }
  if (lengths > 1) return Refusal{400, "the request has Content-Length more than once"};
  if (codings > 1) return Refusal{400, "the request has Transfer-Encoding more than once"};
  if (codings == 1) {
    const std::string coding = req.get_header_value("Transfer-Encoding");
    if (!body_method) {
      return Refusal{400, absl::StrCat(m, " with Transfer-Encoding is not supported")};
    }
    if (absl::EqualsIgnoreCase(coding, "chunked")) return std::nullopt;
    return Refusal{501, absl::StrCat("Transfer-Encoding '", coding,
                                     "' is not supported: send the body chunked or with a "
                                     "Content-Length")};
  }
  if (lengths == 0) {
    if (!body_method) return std::nullopt;
    return Refusal{411, absl::StrCat(m, " needs a Content-Length (or Transfer-Encoding: chunked)")};
  }
  const std::string length = req.get_header_value("Content-Length");
  if (length.empty() || length.size() > 18 ||
      !std::all_of(length.begin(), length.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Refusal{400, absl::StrCat("Content-Length '", length, "' is not a number of bytes")};
  }
  if (!body_method && m != "DELETE" && std::stoll(length) != 0) {
    return Refusal{400, absl::StrCat("a ", m, " request cannot have a body")};
  }
  return std::nullopt;
}

}  // namespace

int ConnectionSocket() {
  const auto* c = ConnectionServer::current_;
  return c == nullptr ? -1 : c->socket();
}

bool ConnectionAlive(int socket) {
  if (socket < 0) return true;
  pollfd p{socket, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return true;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
}

bool RequestTimedOut() {
  const auto* c = ConnectionServer::current_;
  return c != nullptr && c->timed_out();
}

bool RequestTooLarge() {
  const auto* c = ConnectionServer::current_;
  return c != nullptr && c->too_large();
}

std::optional<Refusal> CheckBodyFraming(const httplib::Request& req) {
  std::optional<Refusal> refusal = FramingRefusal(req);
  if (refusal.has_value() && ConnectionServer::current_ != nullptr) {
    ConnectionServer::current_->CloseAfterRequest();
  }
  return refusal;
}

}  // namespace ladder
