#include "src/serve/prefill_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"
#include "src/serve/kv_blocks.h"
#include "src/serve/transfer_protocol.h"

namespace ladder {
namespace {

constexpr int kHelloTimeoutSeconds = 10;

// "HOST:PORT" of a connected socket's peer, for log lines.
std::string PeerName(const sockaddr_storage& a) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), sizeof a, host, sizeof host, port,
                  sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefillServer>> PrefillServer::Create(Gpt* model,
                                                                     const Options& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("the transfer port must be in [0, 65535], got ", options.port));
  }
  if (options.max_batch_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_tokens must be >= 1, got ", options.max_batch_tokens));
  }
  // One context's blocks: the prompt being prefilled is the only sequence.
  ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(model->config(), model->backend(),
                                                  KvBlockPool::BlocksFor(model->config().context),
                                                  options.kv_format));
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(options.port);
  if (getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", options.host));
  }
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool listening =
      fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0;
  freeaddrinfo(found);
  if (!listening) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.host, ":", options.port, ": ", why));
  }
  sockaddr_storage bound = {};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::unique_ptr<PrefillServer> s(
      new PrefillServer(model, options, std::move(cache), fd, bound_port));
  if (pipe2(s->wake_, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  return s;
}

PrefillServer::PrefillServer(Gpt* model, const Options& options, KvCache cache, int listen_fd,
                             int port)
    : model_(model),
      options_(options),
      cache_(std::move(cache)),
      listen_fd_(listen_fd),
      port_(port) {}

PrefillServer::~PrefillServer() {
  Shutdown();
  Reap(/*all=*/true);
  close(listen_fd_);
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

void PrefillServer::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  stopping_ = true;
  if (wake_[1] >= 0) {
    const char c = 0;
    (void)!write(wake_[1], &c, 1);
  }
  // Wakes every connection's thread out of its read.
  for (Connection& c : connections_) shutdown(c.fd, SHUT_RDWR);
}

void PrefillServer::Reap(bool all) {
  std::list<Connection> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      auto next = std::next(it);
      if (all || it->done) ended.splice(ended.end(), connections_, it);
      it = next;
    }
  }
  for (Connection& c : ended) {
    c.thread.join();
    close(c.fd);
  }
}

absl::Status PrefillServer::Serve() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(p, 2, 1000) < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    Reap(/*all=*/false);
    if (p[1].revents != 0) break;
    if ((p[0].revents & POLLIN) == 0) continue;
    sockaddr_storage peer = {};
    socklen_t len = sizeof peer;
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the peer gave up already, or out of descriptors: try later
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      close(fd);
      break;
    }
    Connection& c = connections_.emplace_back();
    c.fd = fd;
    c.peer = PeerName(peer);
    c.thread = std::thread([this, &c] { Talk(&c); });
  }
  Reap(/*all=*/true);
  return absl::OkStatus();
}

absl::StatusOr<std::string> PrefillServer::RunPrompt(const std::vector<int32_t>& prompt) {
  std::lock_guard<std::mutex> lock(model_mu_);
  const int64_t tokens = static_cast<int64_t>(prompt.size()) - 1;
  CachedTokens batch;
  batch.max_blocks = cache_.num_blocks();
  for (int b = 0; b < batch.max_blocks; ++b) batch.block_tables.push_back(b);
  std::vector<float> logits;
  for (int64_t first = 0; first < tokens; first += options_.max_batch_tokens) {
    batch.tokens.clear();
    batch.seq.clear();
    batch.pos.clear();
    for (int64_t p = first; p < std::min<int64_t>(tokens, first + options_.max_batch_tokens); ++p) {
      batch.tokens.push_back(prompt[p]);
      batch.seq.push_back(0);
      batch.pos.push_back(static_cast<int32_t>(p));
    }
    RETURN_IF_ERROR(model_->ForwardCached(batch, cache_, &logits));
  }
  std::string rows;
  RETURN_IF_ERROR(cache_.ReadRows(batch.block_tables, tokens, &rows));
  return rows;
}

void PrefillServer::Talk(Connection* c) {
  const GptConfig& cfg = model_->config();
  transfer::PeerModel peer;
  peer.config = cfg;
  peer.weights = model_->weight_format();
  peer.kv = options_.kv_format;
  auto refuse = [c](const absl::Status& why) {
    std::fprintf(stderr, "ladder serve: transfer connection from %s closed: %s\n", c->peer.c_str(),
                 std::string(why.message()).c_str());
  };
  // The hello, then prompts: a prompt's payload is at most a context of
  // tokens. A peer gets kHelloTimeoutSeconds to say hello; after that the decode
  // side may leave its connection idle as long as it likes.
  timeval limit = {kHelloTimeoutSeconds, 0};
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  absl::StatusOr<transfer::Frame> hello = transfer::ReadFrame(c->fd, 1 << 16);
  limit.tv_sec = 0;
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  absl::Status ok = hello.ok() && hello->type != transfer::FrameType::kHello
                        ? absl::DataLossError("the first frame is not a hello")
                        : hello.status();
  if (ok.ok()) ok = transfer::CheckHello(hello->payload, peer);
  if (ok.code() == absl::StatusCode::kFailedPrecondition) {
    transfer::WriteFrame(c->fd, transfer::FrameType::kError, 0, ok.message()).IgnoreError();
  }
  if (ok.ok()) ok = transfer::WriteFrame(c->fd, transfer::FrameType::kHelloOk, 0, "");
  while (ok.ok()) {
    absl::StatusOr<transfer::Frame> f = transfer::ReadFrame(c->fd, 4 + 4 * uint64_t(cfg.context));
    if (!f.ok()) {
      // A peer closing between requests is the normal end of a connection.
      if (!transfer::IsCleanClose(f.status())) ok = f.status();
      break;
    }
    absl::StatusOr<std::vector<int32_t>> prompt =
        f->type == transfer::FrameType::kPrefill ? transfer::DecodePrompt(f->payload)
                                                 : absl::DataLossError("expected a prompt frame");
    if (!prompt.ok()) {
      ok = prompt.status();
      break;
    }
    absl::Status valid = absl::OkStatus();
    if (prompt->size() < 2 || static_cast<int64_t>(prompt->size()) > cfg.context) {
      valid = absl::InvalidArgumentError(absl::StrCat("a prompt of ", prompt->size(),
                                                      " tokens (expected 2 to ", cfg.context, ")"));
    }
    for (int32_t t : *prompt) {
      if (valid.ok() && (t < 0 || t >= cfg.vocab_size)) {
        valid = absl::InvalidArgumentError(
            absl::StrCat("token ", t, " is outside the vocabulary [0, ", cfg.vocab_size, ")"));
      }
    }
    absl::StatusOr<std::string> rows = valid.ok() ? RunPrompt(*prompt) : valid;
    ok = rows.ok() ? transfer::WriteFrame(
                         c->fd, transfer::FrameType::kKv, f->request,
                         transfer::EncodeRows(static_cast<int64_t>(prompt->size()) - 1, *rows))
                   : transfer::WriteFrame(c->fd, transfer::FrameType::kError, f->request,
                                          rows.status().message());
  }
  if (!ok.ok()) refuse(ok);
  shutdown(c->fd, SHUT_RDWR);
  c->done = true;
}

}  // namespace ladder
