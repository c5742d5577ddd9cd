#include "src/serve/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "src/serve/openai_api.h"
#include "src/serve/text_stream.h"

namespace ladder {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

// httplib listens with a backlog of 5: a burst of clients connecting at once
// overflows it, and the dropped connections retry only after a second or
// more. This names the listening socket so its backlog can be raised.
class Listener : public httplib::Server {
 public:
  int socket() const { return static_cast<int>(svr_sock_); }
};

// One request's events, filled by the loop thread, drained by its handler.
class EventQueue {
 public:
  EngineLoop::Callback Callback(std::shared_ptr<EventQueue> self) {
    return [self = std::move(self)](const LoopEvent& e) {
      {
        std::lock_guard<std::mutex> lock(self->mu_);
        self->events_.push_back(e);
      }
      self->cv_.notify_all();
    };
  }
  // Waits up to `timeout` for events and takes them all.
  std::deque<LoopEvent> Take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    return std::exchange(events_, {});
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<LoopEvent> events_;
};

// "host:port" of a socket address, written as httplib writes
// Request::remote_addr / local_addr.
bool AddressOf(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof(h), s, sizeof(s),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(s);
  return true;
}

// The socket of the connection `req` came on, or -1. httplib does not hand
// it to handlers, but names both ends; the socket stays open while the
// handler (or its content provider) runs.
int ConnectionSocket(const httplib::Request& req) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    char* end = nullptr;
    const std::string name = entry.path().filename().string();
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (*end != '\0') continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;
    }
    std::string lh, ph;
    int lp = 0, pp = 0;
    if (AddressOf(local, local_len, &lh, &lp) && AddressOf(peer, peer_len, &ph, &pp) &&
        lp == req.local_port && pp == req.remote_port && lh == req.local_addr &&
        ph == req.remote_addr) {
      return static_cast<int>(fd);
    }
  }
  return -1;
}

// False once the client has closed its end (or the connection broke).
bool ConnectionAlive(int fd) {
  if (fd < 0) return true;  // not detectable
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return true;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
}

void SetError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(ErrorJson(e), "application/json");
}

void SetError(httplib::Response& res, int status, const std::string& message,
              const std::string& type = "invalid_request_error") {
  ApiError e;
  e.http_status = status;
  e.message = message;
  e.type = type;
  SetError(res, e);
}

// One generation in flight: the request's tokens turned into text.
struct Generation {
  Generation(EngineLoop* loop, const Tokenizer* tokenizer, const CompletionRequest& r)
      : loop(loop), text(tokenizer, r.stop), include_usage(r.include_usage) {
    usage.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  }

  // Waits a little for events; the text they add. Sets `done` at the end.
  std::string Advance() {
    std::string delta;
    for (const LoopEvent& e : queue->Take(kPollInterval)) {
      if (done) break;
      for (int32_t token : e.tokens) {
        ++usage.completion_tokens;
        delta += text.Push(token);
        if (text.stopped()) {
          loop->Cancel(id, FinishReason::kStop);
          finish_reason = "stop";
          done = true;
          return delta;
        }
      }
      if (!e.finished) continue;
      done = true;
      if (e.reason == FinishReason::kLength) {
        delta += text.Finish();
        finish_reason = text.stopped() ? "stop" : "length";
      } else if (e.reason == FinishReason::kError) {
        error = e.error.ok() ? absl::InternalError("the engine failed") : e.error;
      } else {
        error = absl::UnavailableError("the request was cancelled by the server");
      }
    }
    return delta;
  }
  // The client went away (or the answer could not be written): drop it.
  void Abandon() {
    if (!done) loop->Cancel(id, FinishReason::kCancelled);
    done = true;
  }

  EngineLoop* loop;
  std::shared_ptr<EventQueue> queue = std::make_shared<EventQueue>();
  TextStream text;
  bool include_usage;
  int64_t id = -1;
  ResponseMeta meta;
  Usage usage;
  int socket = -1;
  bool done = false;
  bool role_sent = false;
  std::string finish_reason;
  absl::Status error;
};

uint64_t RandomSeed() {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  uint64_t z = counter.fetch_add(0x9E3779B97F4A7C15ULL);  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void AppendMetric(std::string* out, const char* name, const char* type, const char* help,
                  const std::string& samples) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", samples);
}

// One gauge or counter without labels.
void AppendScalar(std::string* out, const char* name, const char* type, const char* help,
                  int64_t value) {
  AppendMetric(out, name, type, help, absl::StrCat(name, " ", value, "\n"));
}

void AppendHistogram(std::string* out, const char* name, const char* help, const Histogram& h) {
  std::string s;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    absl::StrAppend(&s, name, "_bucket{le=\"", h.bounds[i], "\"} ", h.counts[i], "\n");
  }
  absl::StrAppend(&s, name, "_bucket{le=\"+Inf\"} ", h.count, "\n", name, "_sum ", h.sum, "\n",
                  name, "_count ", h.count, "\n");
  AppendMetric(out, name, "histogram", help, s);
}

}  // namespace

HttpServer::HttpServer(const ServerOptions& options, EngineLoop* loop, const Tokenizer* tokenizer,
                       const GptConfig& model)
    : options_(options),
      loop_(loop),
      tokenizer_(tokenizer),
      model_(model),
      started_(static_cast<int64_t>(std::time(nullptr))),
      server_(std::make_unique<Listener>()) {}

HttpServer::~HttpServer() {
  if (server_->is_running()) server_->stop();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const ServerOptions& options,
                                                               EngineLoop* loop,
                                                               const Tokenizer* tokenizer,
                                                               const GptConfig& model) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("the port must be in [0, 65535], got ", options.port));
  }
  if (options.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be >= 1, got ", options.threads));
  }
  std::unique_ptr<HttpServer> s(new HttpServer(options, loop, tokenizer, model));
  s->Routes();
  if (options.port == 0) {
    s->port_ = s->server_->bind_to_any_port(options.host);
    if (s->port_ < 0) s->port_ = 0;
  } else if (s->server_->bind_to_port(options.host, options.port)) {
    s->port_ = options.port;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.host, ":", options.port));
  }
  // Listening again only changes the backlog.
  if (::listen(static_cast<Listener&>(*s->server_).socket(), SOMAXCONN) != 0) {
    return absl::InternalError(absl::StrCat("listen: ", std::strerror(errno)));
  }
  return s;
}

std::shared_ptr<void> HttpServer::Enter() {
  {
    std::lock_guard<std::mutex> lock(active_mu_);
    ++active_;
  }
  return std::shared_ptr<void>(nullptr, [this](void*) {
    {
      std::lock_guard<std::mutex> lock(active_mu_);
      --active_;
    }
    active_cv_.notify_all();
  });
}

void HttpServer::Routes() {
  httplib::Server& s = *server_;
  const int threads = options_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_payload_max_length(options_.max_body_bytes);

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || !absl::StartsWith(req.path, "/v1/")) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string want = absl::StrCat("Bearer ", options_.api_key);
    const std::string got = req.get_header_value("Authorization");
    // Constant-time comparison of equal lengths.
    unsigned diff = got.size() == want.size() ? 0 : 1;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) diff |= got[i] ^ want[i];
    if (diff == 0) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = 401;
    e.message =
        got.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "incorrect API key";
    e.code = "invalid_api_key";
    SetError(res, e);
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return;
    if (res.status == 404) {
      SetError(res, 404, absl::StrCat("no route for ", req.method, " ", req.path));
    } else if (res.status == 413) {
      SetError(res, 413,
               absl::StrCat("the request body exceeds the limit of ", options_.max_body_bytes,
                            " bytes"));
    } else {
      SetError(res, res.status, absl::StrCat("HTTP error ", res.status));
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    SetError(res, 500, "internal error", "server_error");
  });

  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(req, res, /*chat=*/false);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(req, res, /*chat=*/true);
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ModelsJson(options_.model_name, started_), "application/json");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {
      res.status = 503;
      res.set_content("{\"status\":\"draining\"}", "application/json");
    } else {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    }
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Metrics(), "text/plain; version=0.0.4");
  });
  // Known routes with the wrong method.
  auto wrong_method = [](const char* allow) {
    return [allow](const httplib::Request& req, httplib::Response& res) {
      SetError(res, 405,
               absl::StrCat(req.method, " is not allowed on ", req.path, "; use ", allow));
      res.set_header("Allow", allow);
    };
  };
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    s.Get(path, wrong_method("POST"));
    s.Put(path, wrong_method("POST"));
    s.Delete(path, wrong_method("POST"));
  }
  for (const char* path : {"/v1/models", "/health", "/metrics"}) {
    s.Post(path, wrong_method("GET"));
    s.Put(path, wrong_method("GET"));
    s.Delete(path, wrong_method("GET"));
  }
}

void HttpServer::Generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  std::shared_ptr<void> active = Enter();
  if (draining_) {
    SetError(res, ErrorFromStatus(absl::UnavailableError("the server is shutting down")));
    return;
  }
  const ModelLimits limits{model_.context, model_.vocab_size};
  absl::StatusOr<CompletionRequest> parsed =
      chat ? ParseChatRequest(req.body, *tokenizer_, limits)
           : ParseCompletionRequest(req.body, *tokenizer_, limits);
  if (!parsed.ok()) {
    SetError(res, ErrorFromStatus(parsed.status()));
    return;
  }
  const CompletionRequest& r = *parsed;
  auto g = std::make_shared<Generation>(loop_, tokenizer_, r);
  EngineRequest er;
  er.prompt = r.prompt;
  er.max_tokens = r.max_tokens;
  er.sampling = r.sampling;
  er.seed = r.has_seed ? r.seed : RandomSeed();
  absl::StatusOr<int64_t> id = loop_->Submit(std::move(er), g->queue->Callback(g->queue));
  if (!id.ok()) {
    SetError(res, ErrorFromStatus(id.status()));
    if (id.status().code() == absl::StatusCode::kResourceExhausted) {
      res.set_header("Retry-After", "1");
    }
    return;
  }
  g->id = *id;
  g->meta.id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", absl::Hex(started_),
                            absl::Hex(next_id_.fetch_add(1), absl::kZeroPad8));
  g->meta.created = static_cast<int64_t>(std::time(nullptr));
  g->meta.model = options_.model_name;
  g->meta.chat = chat;
  g->socket = ConnectionSocket(req);

  if (!r.stream) {
    std::string text;
    while (!g->done) {
      if (!ConnectionAlive(g->socket)) {
        g->Abandon();
        return;  // nobody to answer
      }
      text += g->Advance();
    }
    if (!g->error.ok()) {
      SetError(res, ErrorFromStatus(g->error));
      return;
    }
    res.set_content(CompletionJson(g->meta, text, g->finish_reason, g->usage), "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [g](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        if (g->meta.chat && !g->role_sent) {
          g->role_sent = true;
          if (!write(SseEvent(ChunkJson(g->meta, "", "", /*role=*/true)))) {
            g->Abandon();
            return false;
          }
          return true;
        }
        for (;;) {
          if (!ConnectionAlive(g->socket)) {
            g->Abandon();
            return false;
          }
          const std::string delta = g->Advance();
          if (!delta.empty() && !write(SseEvent(ChunkJson(g->meta, delta, "")))) {
            g->Abandon();
            return false;
          }
          if (g->done) {
            std::string tail;
            if (!g->error.ok()) {
              tail = SseEvent(ErrorJson(ErrorFromStatus(g->error)));
            } else {
              tail = SseEvent(ChunkJson(g->meta, "", g->finish_reason));
              if (g->include_usage) tail += SseEvent(UsageChunkJson(g->meta, g->usage));
            }
            absl::StrAppend(&tail, kSseDone);
            if (!write(tail)) return false;
            sink.done();
            return true;
          }
          if (!delta.empty()) return true;
        }
      },
      [g, active](bool) { g->Abandon(); });
}

std::string HttpServer::Metrics() const {
  const LoopStats st = loop_->stats();
  std::string out;
  AppendScalar(&out, "ladder_requests_running", "gauge", "Requests in the running batch.",
               st.running);
  AppendScalar(&out, "ladder_requests_waiting", "gauge", "Accepted requests not yet running.",
               st.waiting);
  AppendScalar(&out, "ladder_kv_blocks_used", "gauge", "KV cache blocks held by requests.",
               st.kv_blocks_used);
  AppendScalar(&out, "ladder_kv_blocks_free", "gauge", "KV cache blocks free (or cached).",
               st.kv_blocks_free);
  AppendScalar(&out, "ladder_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
               st.prompt_tokens);
  AppendScalar(&out, "ladder_generation_tokens_total", "counter", "Tokens generated.",
               st.generated_tokens);
  std::string finished;
  for (int i = 0; i < kNumFinishReasons; ++i) {
    absl::StrAppend(&finished, "ladder_requests_finished_total{reason=\"",
                    FinishReasonName(static_cast<FinishReason>(i)), "\"} ", st.finished[i], "\n");
  }
  AppendMetric(&out, "ladder_requests_finished_total", "counter", "Requests finished, by reason.",
               finished);
  AppendHistogram(&out, "ladder_time_to_first_token_seconds",
                  "From acceptance to the first generated token.", st.ttft);
  AppendHistogram(&out, "ladder_time_per_output_token_seconds",
                  "Between consecutive generated tokens of a request.", st.tpot);
  return out;
}

absl::Status HttpServer::Serve() {
  const bool ok = server_->listen_after_bind();
  serve_returned_ = true;
  if (!ok && !draining_) {
    return absl::UnavailableError(
        absl::StrCat("the server on ", options_.host, ":", port_, " stopped unexpectedly"));
  }
  return absl::OkStatus();
}

void HttpServer::Shutdown() {
  std::lock_guard<std::mutex> once(shutdown_mu_);
  draining_ = true;
  loop_->Drain();
  {
    std::unique_lock<std::mutex> lock(active_mu_);
    active_cv_.wait(lock, [&] { return active_ == 0; });
  }
  // listen_after_bind may not have started yet; a stop() before it would be lost.
  while (!serve_returned_) {
    if (server_->is_running()) {
      server_->stop();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

namespace {

int g_signal_pipe[2] = {-1, -1};

extern "C" void OnStopSignal(int) {
  const int saved = errno;
  const char c = 1;
  if (write(g_signal_pipe[1], &c, 1) < 0) {
  }
  errno = saved;
}

}  // namespace

absl::Status ServeUntilSignal(HttpServer* server) {
  return ServeUntilSignal([server] { return server->Serve(); }, [server] { server->Shutdown(); });
}

absl::Status ServeUntilSignal(const std::function<absl::Status()>& serve,
                              const std::function<void()>& shutdown) {
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  struct sigaction sa = {}, old_term = {}, old_int = {}, old_pipe = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGINT, &sa, &old_int);
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &old_pipe);

  std::thread watcher([&shutdown] {
    char c;
    while (read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    shutdown();
  });
  absl::Status status = serve();
  OnStopSignal(0);  // wakes the watcher if no signal came (Serve failed)
  watcher.join();

  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
  return status;
}

}  // namespace ladder
