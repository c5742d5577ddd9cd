// The prefill role of a disaggregated server (`ladder serve --role
// prefill`): it runs prompts through its model and ships their keys and
// values to decode servers over the KV transfer protocol
// (transfer_protocol.h, docs/formats.md), which continue the requests as
// if they had run the prompts themselves (remote_prefill.h, engine.h
// SubmitPrefilled).
//
// Each connection gets a thread; the model runs one prompt at a time, in
// chunks of max_batch_tokens tokens like the engine's chunked prefill, and
// only the prompt's first prompt - 1 tokens: the decode side runs the last
// one, so it samples from its own logits. A connection that sends anything
// but well-formed frames (garbage, a bad checksum, a wrong version, a
// hello that does not match this model and KV format) is closed with a log
// line on stderr; nothing a peer sends can stop the server.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/model/gpt.h"
#include "src/model/kv_cache.h"

namespace ladder {

class PrefillServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: any free port (see port())
    KvFormat kv_format = KvFormat::kF32;
    int max_batch_tokens = 256;
  };

  // Listens on host:port; Unavailable when it cannot, InvalidArgument for
  // bad options. `model` must hold the whole model and outlive the server.
  static absl::StatusOr<std::unique_ptr<PrefillServer>> Create(Gpt* model, const Options& options);
  // Shuts down (if Serve is still running, call Shutdown and let it return first).
  ~PrefillServer();

  int port() const { return port_; }
  // Accepts and serves connections until Shutdown; returns once every
  // connection's thread has ended. Call it once.
  absl::Status Serve();
  // Makes Serve return; any thread, any number of times.
  void Shutdown();

 private:
  struct Connection {
    int fd = -1;
    std::string peer;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  PrefillServer(Gpt* model, const Options& options, KvCache cache, int listen_fd, int port);
  // A connection's thread: the hello, then prefill requests until the
  // peer closes or misbehaves.
  void Talk(Connection* c);
  // The rows of prompt[0, size - 1) (the prompt already checked).
  absl::StatusOr<std::string> RunPrompt(const std::vector<int32_t>& prompt);
  // Joins the threads of connections that ended (all of them with `all`).
  void Reap(bool all);

  Gpt* model_;
  const Options options_;
  std::mutex model_mu_;  // one prompt at a time through model_ and cache_
  KvCache cache_;
  const int listen_fd_;
  const int port_;
  int wake_[2] = {-1, -1};  // Shutdown writes to wake_[1]
  std::mutex mu_;           // guards connections_ and stopping_
  std::list<Connection> connections_;
  bool stopping_ = false;
};

}  // namespace ladder
