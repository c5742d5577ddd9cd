// The HTTP front of `ladder serve` (docs/serving.md), on cpp-httplib:
//   POST /v1/completions, POST /v1/chat/completions   (openai_api.h)
//   GET  /v1/models
//   GET  /health    always public; 503 while shutting down
//   GET  /metrics   Prometheus text exposition (EngineLoop stats)
// With an API key every /v1/* route needs "Authorization: Bearer KEY" (401
// otherwise). Bodies over max_body_bytes get 413; unknown routes 404, a
// known route with the wrong method 405; every error is an OpenAI error
// object. A full waiting queue answers 429 with Retry-After.
//
// Each generation request is one handler thread waiting on the request's
// event queue (EngineLoop callback). Streaming answers are chunked
// server-sent events; detokenization and stop strings go through
// TextStream, and a stop string cancels the request in the engine. A client
// that goes away cancels its request so its KV blocks return: found by a
// failed write, or sooner by polling the connection's socket (which the
// connection side, connection_server.h, hands the handler's thread) for a
// hang-up between tokens (streaming and non-streaming alike).
//
// Connections (connection_server.h): idle ones wait on one epoll thread, not
// a handler thread, and close after keep_alive_timeout; a request must be
// read within request_timeout (else 408); so idle and slow clients cannot
// keep others from being answered.
//
// Shutdown (a signal, via ServeUntilSignal): new generation requests get
// 503, every accepted request runs to its end and its answer is written
// out, then the listener stops and Serve returns.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/model/gpt_config.h"
#include "src/serve/engine_loop.h"
#include "src/serve/openai_api.h"
#include "src/tokenizer/bpe.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace ladder {

class JsonConstraint;
class JsonConstraintFactory;

class ConnectionServer;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port (see HttpServer::port)
  std::string api_key;                  // empty: no authentication
  size_t max_body_bytes = 1024 * 1024;  // larger request bodies get 413
  // Requests read or answered at once; each generation request, running or
  // waiting in the engine, holds one (connection_server.h).
  int threads = 64;
  // A connection with no request in progress closes after this.
  std::chrono::milliseconds keep_alive_timeout{5000};
  // Reading one request (head and body) must finish within this of its
  // first byte; else 408 (or, before its first line is in, a close).
  std::chrono::milliseconds request_timeout{10000};
  // The names a request's `model` may take (/v1/models lists them); answers
  // carry the one asked for, the first when none was. At least one.
  std::vector<std::string> model_names = {"ladder"};
};

class HttpServer {
 public:
  // Binds the listening socket. `loop` and `tokenizer` must outlive the
  // server; `model` gives the limits requests are checked against.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Create(const ServerOptions& options,
                                                            EngineLoop* loop,
                                                            const Tokenizer* tokenizer,
                                                            const GptConfig& model);
  ~HttpServer();

  int port() const { return port_; }
  // Serves on the calling thread until Shutdown stops the listener.
  absl::Status Serve();
  // Graceful stop, from any thread (not a signal handler) while Serve runs
  // or is about to: refuses new generation requests (503), lets the accepted
  // ones finish and their answers be written, then stops the listener.
  // Returns when done.
  void Shutdown();
  bool shutting_down() const { return draining_.load(); }

 private:
  HttpServer(const ServerOptions& options, EngineLoop* loop, const Tokenizer* tokenizer,
             const GptConfig& model);
  void Routes();
  void Generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void Embeddings(const httplib::Request& req, httplib::Response& res);
  ModelLimits ApiLimits() const;
  // The constraint response_format asks for (null for text), for the first
  // candidate; the others take its Fresh() copies. InvalidArgument (param
  // response_format) for a schema outside the supported subset.
  absl::StatusOr<std::shared_ptr<JsonConstraint>> MakeConstraint(const CompletionRequest& r) const;
  std::string Metrics() const;
  // A token held while a generation request (and its answer) is in flight.
  std::shared_ptr<void> Enter();

  ServerOptions options_;
  EngineLoop* loop_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<JsonConstraintFactory> json_;  // response_format's constraints
  GptConfig model_;
  int64_t started_ = 0;  // unix seconds
  int port_ = 0;
  std::unique_ptr<ConnectionServer> server_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> serve_returned_{false};
  std::atomic<uint64_t> next_id_{0};
  std::mutex shutdown_mu_;
  std::mutex active_mu_;
  std::condition_variable active_cv_;
  int active_ = 0;
};

// Runs server->Serve() until SIGTERM or SIGINT arrives, then shuts it down
// gracefully (the handler only writes to a pipe; a watcher thread does the
// work). SIGPIPE is ignored while serving.
absl::Status ServeUntilSignal(HttpServer* server);
// The same for any server: `serve` runs until `shutdown` (called from the
// watcher thread) makes it return.
absl::Status ServeUntilSignal(const std::function<absl::Status()>& serve,
                              const std::function<void()>& shutdown);

}  // namespace ladder
