// The decode role's client of a prefill server (prefill_server.h): it sends
// a prompt over the KV transfer protocol (transfer_protocol.h) and receives
// the keys and values of its first prompt - 1 tokens, for
// Engine::SubmitPrefilled.
//
// Connections are opened on demand, shaken hands with (model shape and KV
// format must match) and kept for reuse, one per concurrent caller. Any
// failure closes the connection it happened on, so a prefill server that
// went away and came back is simply connected to again by the next call; a
// pooled connection that turns out dead before any answer arrived is
// retried once on a fresh one.
//
// Threads: every method may be called from any thread, concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/serve/transfer_protocol.h"

namespace ladder {

class RemotePrefill {
 public:
  // `address` is HOST:PORT (InvalidArgument naming it otherwise); `model`
  // is this (the decode) side's. Nothing connects yet. `timeout_ms` bounds
  // connecting and each wait for bytes.
  static absl::StatusOr<std::unique_ptr<RemotePrefill>> Create(absl::string_view address,
                                                               const transfer::PeerModel& model,
                                                               int timeout_ms = 30000);
  ~RemotePrefill();

  // Connects and shakes hands now: OK, Unavailable (cannot connect, or the
  // hello's answer is not a prefill server's: the message says what came
  // instead and asks whether the port is a --transfer-port) or
  // FailedPrecondition (the prefill server's model, weight or KV format differs;
  // the message says how).
  absl::Status Check();
  // The rows of prompt[0, size - 1) (prompt of 2 tokens or more), computed
  // by the prefill server. Unavailable "prefill server HOST:PORT: <why>"
  // when it cannot be reached, the connection drops or the answer is
  // corrupt (bad magic, version, checksum, size, request id);
  // FailedPrecondition as Check.
  absl::StatusOr<std::string> Prefill(const std::vector<int32_t>& prompt);

  const std::string& address() const { return address_; }

 private:
  RemotePrefill(std::string address, std::string host, std::string port,
                const transfer::PeerModel& model, int timeout_ms)
      : address_(std::move(address)),
        host_(std::move(host)),
        port_(std::move(port)),
        model_(model),
        timeout_ms_(timeout_ms) {}
  // A connected socket that has passed the hello: a pooled one (*reused
  // true) or a new one.
  absl::StatusOr<int> Take(bool* reused);
  absl::StatusOr<int> Connect();
  // One kPrefill / kKv exchange on `fd`.
  absl::StatusOr<std::string> Exchange(int fd, const std::vector<int32_t>& prompt);
  void Put(int fd);
  absl::Status Annotate(const absl::Status& s) const;

  const std::string address_, host_, port_;
  const transfer::PeerModel model_;
  const int timeout_ms_;
  std::atomic<uint64_t> next_request_{1};
  std::mutex mu_;
  std::vector<int> idle_;  // pooled connections
};

}  // namespace ladder
