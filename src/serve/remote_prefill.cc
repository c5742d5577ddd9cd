#include "src/serve/remote_prefill.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/core/status.h"
#include "src/serve/transfer_protocol.h"

namespace ladder {

absl::StatusOr<std::unique_ptr<RemotePrefill>> RemotePrefill::Create(
    absl::string_view address, const transfer::PeerModel& model, int timeout_ms) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prefill server address must be HOST:PORT with a port in [1, 65535], got '",
        std::string(address), "'"));
  }
  if (timeout_ms < 1) {
    return absl::InvalidArgumentError(absl::StrCat("timeout_ms must be >= 1, got ", timeout_ms));
  }
  return std::unique_ptr<RemotePrefill>(new RemotePrefill(std::string(address),
                                                          std::string(address.substr(0, colon)),
                                                          absl::StrCat(port), model, timeout_ms));
}

RemotePrefill::~RemotePrefill() {
  for (int fd : idle_) close(fd);
}

absl::Status RemotePrefill::Annotate(const absl::Status& s) const {
  return absl::Status(
      s.code() == absl::StatusCode::kFailedPrecondition ? s.code() : absl::StatusCode::kUnavailable,
      absl::StrCat("prefill server ", address_, ": ", s.message()));
}

absl::StatusOr<int> RemotePrefill::Connect() {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host_.c_str(), port_.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host_, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    // Non-blocking connect, so an unreachable host costs timeout_ms, not minutes.
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p = {fd, POLLOUT, 0};
        socklen_t len = sizeof err;
        err = poll(&p, 1, timeout_ms_) == 1 ? 0 : ETIMEDOUT;
        if (err == 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err != 0) {
      why = std::strerror(err);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot connect: ", why));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv = {timeout_ms_ / 1000, (timeout_ms_ % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

  if (absl::Status hello =
          transfer::WriteFrame(fd, transfer::FrameType::kHello, 0, transfer::EncodeHello(model_));
      !hello.ok()) {
    close(fd);
    return hello;
  }
  absl::StatusOr<transfer::Frame> answer = transfer::ReadFrame(fd, 1 << 16);
  if (answer.ok() && answer->type == transfer::FrameType::kError) {
    close(fd);
    return absl::FailedPreconditionError(answer->payload);
  }
  if (answer.ok() && answer->type != transfer::FrameType::kHelloOk) {
    answer = absl::DataLossError("the answer to the hello is not a hello");
  }
  if (!answer.ok()) {
    close(fd);
    // Something listens there but does not answer the hello as a prefill
    // server does: most likely the wrong port.
    return absl::Status(answer.status().code(),
                        absl::StrCat(answer.status().message(),
                                     ", in answer to the hello: is it the --transfer-port of a "
                                     "`ladder serve --role prefill`?"));
  }
  return fd;
}

absl::StatusOr<int> RemotePrefill::Take(bool* reused) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    *reused = !idle_.empty();
    if (*reused) {
      const int fd = idle_.back();
      idle_.pop_back();
      return fd;
    }
  }
  return Connect();
}

void RemotePrefill::Put(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(fd);
}

absl::Status RemotePrefill::Check() {
  absl::StatusOr<int> fd = Connect();
  if (!fd.ok()) return Annotate(fd.status());
  Put(*fd);
  return absl::OkStatus();
}

absl::StatusOr<std::string> RemotePrefill::Exchange(int fd, const std::vector<int32_t>& prompt) {
  const uint64_t id = next_request_.fetch_add(1);
  RETURN_IF_ERROR(
      transfer::WriteFrame(fd, transfer::FrameType::kPrefill, id, transfer::EncodePrompt(prompt)));
  const int64_t tokens = static_cast<int64_t>(prompt.size()) - 1;
  const int64_t per_token = KvCache::BytesPerToken(model_.config, model_.kv);
  ASSIGN_OR_RETURN(transfer::Frame f, transfer::ReadFrame(fd, 8 + tokens * per_token));
  if (f.request != id) {
    return absl::DataLossError(
        absl::StrCat("the answer is for request ", f.request, ", expected ", id));
  }
  if (f.type == transfer::FrameType::kError) {
    return absl::UnavailableError(absl::StrCat("refused the prompt: ", f.payload));
  }
  if (f.type != transfer::FrameType::kKv) {
    return absl::DataLossError("the answer to a prompt is not its KV rows");
  }
  return transfer::DecodeRows(f.payload, tokens, per_token);
}

absl::StatusOr<std::string> RemotePrefill::Prefill(const std::vector<int32_t>& prompt) {
  if (prompt.size() < 2) {
    return absl::InvalidArgumentError("a remote prefill needs a prompt of 2 tokens or more");
  }
  absl::Status first;  // the pooled connection's failure, if any
  for (;;) {
    bool reused = false;
    absl::StatusOr<int> fd = Take(&reused);
    // When the retry cannot even connect, the first failure says more.
    if (!fd.ok()) return Annotate(first.ok() ? fd.status() : first);
    absl::StatusOr<std::string> rows = Exchange(*fd, prompt);
    if (rows.ok()) {
      Put(*fd);
      return rows;
    }
    close(*fd);
    // A pooled connection may have died while idle (the prefill server
    // restarted): that shows as a closed connection, and a fresh one may work.
    if (reused && first.ok() && rows.status().code() == absl::StatusCode::kUnavailable) {
      first = rows.status();
      continue;
    }
    return Annotate(rows.status());
  }
}

}  // namespace ladder
