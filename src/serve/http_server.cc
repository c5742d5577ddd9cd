#include "src/serve/http_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "src/serve/connection_server.h"
#include "src/serve/json_constraint.h"
#include "src/serve/openai_api.h"
#include "src/serve/text_stream.h"

namespace ladder {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

// Room for a request's head (its request line and headers) beyond
// max_body_bytes, in the bytes one request may read.
constexpr size_t kHeadBytes = 64 * 1024;

// Why a request stopped when its client hung up (ConnectionAlive false):
// read only by a client that closed just its sending half (a
// shutdown(SHUT_WR)), which counts as gone.
ApiError ClientLeft() {
  ApiError e;
  e.http_status = 400;
  e.message =
      "the client closed its end of the connection, which ladder takes as leaving: the request "
      "was cancelled";
  return e;
}

// One request's events (of all its candidates), filled by the loop thread,
// drained by its handler.
class EventQueue {
 public:
  // The callback of candidate `index`.
  EngineLoop::Callback Callback(std::shared_ptr<EventQueue> self, int index) {
    return [self = std::move(self), index](const LoopEvent& e) {
      {
        std::lock_guard<std::mutex> lock(self->mu_);
        self->events_.emplace_back(index, e);
      }
      self->cv_.notify_all();
    };
  }
  // Waits up to `timeout` for events and takes them all.
  std::deque<std::pair<int, LoopEvent>> Take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    return std::exchange(events_, {});
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int, LoopEvent>> events_;
};

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

// One candidate of a request in flight: its tokens turned into text (and
// log-probabilities).
struct Candidate {
  Candidate(const Tokenizer* tokenizer, const std::vector<std::string>& stops)
      : text(tokenizer, stops) {}
  EngineRequest request;  // what it asks the engine for
  int64_t id = -1;        // in the engine loop, once submitted
  TextStream text;
  int64_t offset = 0;    // the next token's text_offset
  double logprob_sum = 0;  // of the generated tokens, for best_of
  int64_t tokens = 0;
  bool done = false;
  std::string finish_reason;
  absl::Status error;
};

// One generation request in flight: best_of candidates for each prompt.
struct Generation {
  Generation(EngineLoop* loop, const Tokenizer* tokenizer, const CompletionRequest& r)
      : loop(loop), tokenizer(tokenizer), request(r) {
    for (const auto& p : r.prompts) {
      usage.prompt_tokens += static_cast<int64_t>(p.size());
      for (int j = 0; j < r.best_of; ++j) cands.emplace_back(tokenizer, r.stop);
    }
  }

  const std::vector<int32_t>& PromptOf(int c) const { return request.prompts[c / request.best_of]; }
  // Candidate c is the first of its prompt's.
  bool Leads(int c) const { return c % request.best_of == 0; }
  // Candidate c waits for its prompt's first to run the prompt: there are
  // full blocks to share (the block of the prompt's last token never is),
  // and the prompt is scored (echo) by nobody, as scoring shares nothing.
  bool Staged(int c) const {
    return PromptOf(c).size() > static_cast<size_t>(kBlockTokens) && !cands[c].request.echo_logprobs;
  }
  // Hands candidate c to the engine.
  absl::Status Submit(int c) {
    absl::StatusOr<int64_t> id = loop->Submit(cands[c].request, queue->Callback(queue, c));
    if (!id.ok()) return id.status();
    cands[c].id = *id;
    return absl::OkStatus();
  }
  // The candidates waiting for leader c, now that it has run its prompt.
  void SubmitFollowers(int c) {
    for (int f = c + 1; f < c + request.best_of; ++f) {
      if (!Staged(f) || cands[f].id >= 0 || cands[f].done) continue;
      if (absl::Status s = Submit(f); !s.ok()) {
        cands[f].error = s;
        cands[f].done = true;
      }
    }
  }
  bool done() const {
    for (const Candidate& c : cands) {
      if (!c.done) return false;
    }
    return true;
  }
  // The first failure, if any candidate failed.
  absl::Status error() const {
    for (const Candidate& c : cands) {
      if (!c.error.ok()) return c.error;
    }
    return absl::OkStatus();
  }

  // The echoed prompt of candidate c: its text and (with logprobs, given
  // the prompt's log-probabilities) its entries.
  void Echo(int c, const std::vector<TokenLogprob>& prompt_logprobs, ChoiceDelta* d) {
    const std::vector<int32_t>& prompt = PromptOf(c);
    d->text += tokenizer->Decode(prompt).value_or("");
    if (request.logprobs < 0) return;
    Candidate& cand = cands[c];
    for (size_t i = 0; i < prompt.size(); ++i) {
      LogprobEntry e;
      if (i == 0 || i - 1 >= prompt_logprobs.size()) {
        e.token = tokenizer->TokenBytes(prompt[i]);
        e.text_offset = cand.offset;
      } else {
        e = MakeLogprobEntry(*tokenizer, prompt_logprobs[i - 1], cand.offset);
      }
      cand.offset += static_cast<int64_t>(tokenizer->TokenBytes(prompt[i]).size());
      d->logprobs.push_back(std::move(e));
    }
  }

  // Waits a little for events; what they add, one delta per candidate that
  // changed (index = candidate). Marks candidates done at their ends.
  std::vector<ChoiceDelta> Advance() {
    std::map<int, ChoiceDelta> deltas;
    for (auto& [c, e] : queue->Take(kPollInterval)) {
      if (Leads(c)) SubmitFollowers(c);
      Candidate& cand = cands[c];
      if (cand.done) continue;
      ChoiceDelta& d = deltas[c];
      d.index = c;
      d.has_logprobs = request.logprobs >= 0;
      if (request.echo && !echoed[c]) {
        echoed[c] = true;
        Echo(c, e.prompt_logprobs, &d);
      }
      for (size_t k = 0; k < e.tokens.size(); ++k) {
        ++usage.completion_tokens;
        ++cand.tokens;
        if (k < e.logprobs.size()) {
          cand.logprob_sum += e.logprobs[k].logprob;
          if (request.logprobs >= 0) {
            d.logprobs.push_back(MakeLogprobEntry(*tokenizer, e.logprobs[k], cand.offset));
          }
        }
        cand.offset += static_cast<int64_t>(tokenizer->TokenBytes(e.tokens[k]).size());
        d.text += cand.text.Push(e.tokens[k]);
        if (cand.text.stopped()) {
          loop->Cancel(cand.id, FinishReason::kStop);
          cand.finish_reason = "stop";
          cand.done = true;
          break;
        }
      }
      if (cand.done || !e.finished) {
        d.finish_reason = cand.finish_reason;
        continue;
      }
      cand.done = true;
      if (e.reason == FinishReason::kLength || e.reason == FinishReason::kStop) {
        d.text += cand.text.Finish();
        cand.finish_reason =
            e.reason == FinishReason::kStop || cand.text.stopped() ? "stop" : "length";
      } else if (e.reason == FinishReason::kError) {
        cand.error = e.error.ok() ? absl::InternalError("the engine failed") : e.error;
      } else {
        cand.error = absl::UnavailableError("the request was cancelled by the server");
      }
      d.finish_reason = cand.finish_reason;
    }
    std::vector<ChoiceDelta> out;
    for (auto& [c, d] : deltas) out.push_back(std::move(d));
    return out;
  }

  // The client went away (or the answer could not be written): drop every
  // candidate still running.
  void Abandon() {
    for (Candidate& c : cands) {
      if (!c.done && c.id >= 0) loop->Cancel(c.id, FinishReason::kCancelled);
      c.done = true;
    }
  }

  // The answer's choices from the whole texts: per prompt, the n candidates
  // with the highest mean log-probability per token (all of them, in order,
  // when best_of == n).
  std::vector<ChoiceDelta> Choices(std::vector<ChoiceDelta> whole) const {
    const int n = request.n, best_of = request.best_of;
    std::vector<ChoiceDelta> out;
    for (size_t p = 0; p < request.prompts.size(); ++p) {
      std::vector<int> order(best_of);
      std::iota(order.begin(), order.end(), static_cast<int>(p) * best_of);
      if (best_of > n) {
        auto mean = [&](int c) {
          return cands[c].tokens ? cands[c].logprob_sum / static_cast<double>(cands[c].tokens) : 0;
        };
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int b) { return mean(a) > mean(b); });
      }
      for (int k = 0; k < n; ++k) {
        ChoiceDelta c = std::move(whole[order[k]]);
        c.index = static_cast<int>(p) * n + k;
        out.push_back(std::move(c));
      }
    }
    return out;
  }

  EngineLoop* loop;
  const Tokenizer* tokenizer;
  CompletionRequest request;
  std::shared_ptr<EventQueue> queue = std::make_shared<EventQueue>();
  std::vector<Candidate> cands;
  std::vector<bool> echoed = std::vector<bool>(request.prompts.size() * request.best_of);
  ResponseMeta meta;
  Usage usage;
  int socket = -1;
  bool roles_sent = false;
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

// How the server's connections are served.
ConnectionLimits Limits(const ServerOptions& options) {
  ConnectionLimits l;
  l.threads = options.threads;
  l.keep_alive_timeout = options.keep_alive_timeout;
  l.request_timeout = options.request_timeout;
  // The body's limit, plus room for the head: what a request may read in all
  // (httplib bounds a Content-Length body by itself, but not a chunked one).
  l.max_request_bytes = options.max_body_bytes + kHeadBytes;
  return l;
}

}  // namespace

HttpServer::HttpServer(const ServerOptions& options, EngineLoop* loop, const Tokenizer* tokenizer,
                       const GptConfig& model)
    : options_(options),
      loop_(loop),
      tokenizer_(tokenizer),
      json_(std::make_unique<JsonConstraintFactory>(*tokenizer)),
      model_(model),
      started_(static_cast<int64_t>(std::time(nullptr))) {}

HttpServer::~HttpServer() {
  if (server_ && server_->is_running()) server_->stop();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const ServerOptions& options,
                                                               EngineLoop* loop,
                                                               const Tokenizer* tokenizer,
                                                               const GptConfig& model) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("the port must be in [0, 65535], got ", options.port));
  }
  std::unique_ptr<HttpServer> s(new HttpServer(options, loop, tokenizer, model));
  absl::StatusOr<std::unique_ptr<ConnectionServer>> server =
      ConnectionServer::Create(Limits(options));
  if (!server.ok()) return server.status();
  s->server_ = std::move(*server);
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
  // httplib listens with a backlog of 5: a burst of clients connecting at
  // once overflows it, and the dropped connections retry only after a second
  // or more. Listening again only raises the backlog.
  if (::listen(s->server_->listening_socket(), SOMAXCONN) != 0) {
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
  s.set_payload_max_length(options_.max_body_bytes);

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (std::optional<Refusal> r = CheckBodyFraming(req)) {
      SetError(res, r->status, r->message);
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options_.api_key.empty() || req.path == "/health" || req.path == "/metrics") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string& want = options_.api_key;
    std::string got = req.get_header_value("Authorization");
    const bool empty = got.empty();
    // The scheme's name is case-insensitive (RFC 9110); the key is not.
    constexpr absl::string_view kScheme = "Bearer ";
    got = absl::StartsWithIgnoreCase(got, kScheme) ? got.substr(kScheme.size()) : std::string();
    // Constant-time comparison of equal lengths.
    unsigned diff = got.size() == want.size() ? 0 : 1;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) diff |= got[i] ^ want[i];
    if (diff == 0) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = 401;
    e.message = empty ? "missing API key: send 'Authorization: Bearer KEY'" : "incorrect API key";
    e.code = "invalid_api_key";
    SetError(res, e);
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return;
    if (res.status == 404) {
      SetError(res, 404, absl::StrCat("no route for ", req.method, " ", req.path));
    } else if (RequestTooLarge()) {
      SetError(res, 413,
               absl::StrCat("the request exceeds the limit of ", options_.max_body_bytes,
                            " bytes of body (and ", kHeadBytes, " of head)"));
    } else if (RequestTimedOut()) {
      SetError(res, 408,
               absl::StrCat("the request was not received within ",
                            options_.request_timeout.count(), " ms"));
    } else if (res.status == 413 && req.body.size() <= options_.max_body_bytes &&
               absl::StartsWith(req.get_header_value("Content-Type"),
                                "application/x-www-form-urlencoded")) {
      // httplib caps form-encoded bodies (curl -d's default type) at 8 KiB.
      SetError(res, 413,
               absl::StrCat("a form-encoded body (Content-Type: "
                            "application/x-www-form-urlencoded, curl -d's default) may hold ",
                            "at most 8192 bytes; send Content-Type: application/json"));
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
    res.set_content(ModelsJson(options_.model_names, started_), "application/json");
  });
  s.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    const auto& names = options_.model_names;
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      SetError(res, ErrorFromStatus(UnknownModel(name)));
      return;
    }
    res.set_content(ModelJson(name, started_), "application/json");
  });
  s.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    Embeddings(req, res);
  });
  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseTokenizeRequest(req.body, *tokenizer_, ApiLimits());
    if (!ids.ok()) {
      SetError(res, ErrorFromStatus(ids.status()));
      return;
    }
    res.set_content(TokenizeJson(*ids, model_.context), "application/json");
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseDetokenizeRequest(req.body, ApiLimits());
    absl::StatusOr<std::string> text = ids.ok() ? tokenizer_->Decode(*ids) : ids.status();
    if (!text.ok()) {
      SetError(res, ErrorFromStatus(text.status()));
      return;
    }
    res.set_content(DetokenizeJson(*text), "application/json");
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
  for (const char* path :
       {"/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/tokenize", "/detokenize"}) {
    s.Get(path, wrong_method("POST"));
    s.Put(path, wrong_method("POST"));
    s.Patch(path, wrong_method("POST"));
    s.Delete(path, wrong_method("POST"));
    s.Options(path, wrong_method("POST"));
  }
  for (const char* path : {"/v1/models", "/v1/models/(.+)", "/health", "/metrics"}) {
    s.Post(path, wrong_method("GET"));
    s.Put(path, wrong_method("GET"));
    s.Patch(path, wrong_method("GET"));
    s.Delete(path, wrong_method("GET"));
    s.Options(path, wrong_method("GET"));
  }
}

void HttpServer::Embeddings(const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<void> active = Enter();
  if (draining_) {
    SetError(res, ErrorFromStatus(absl::UnavailableError("the server is shutting down")));
    return;
  }
  absl::StatusOr<EmbeddingRequest> r =
      ParseEmbeddingRequest(req.body, *tokenizer_, ApiLimits(), model_.n_embd);
  if (!r.ok()) {
    SetError(res, ErrorFromStatus(r.status()));
    return;
  }
  std::vector<std::vector<float>> vectors;
  int64_t tokens = 0;
  for (const std::vector<int32_t>& input : r->inputs) {
    absl::StatusOr<std::vector<float>> v = loop_->Embed(input);
    if (!v.ok()) {
      SetError(res, ErrorFromStatus(v.status()));
      return;
    }
    vectors.push_back(*std::move(v));
    tokens += static_cast<int64_t>(input.size());
  }
  res.set_content(EmbeddingsJson(r->model, vectors, r->base64, tokens), "application/json");
}

absl::StatusOr<std::shared_ptr<JsonConstraint>> HttpServer::MakeConstraint(
    const CompletionRequest& r) const {
  std::shared_ptr<JsonConstraint> c;
  switch (r.response_format.type) {
    case ResponseFormat::Type::kText:
      return nullptr;
    case ResponseFormat::Type::kJsonObject:
      c = json_->Object();
      break;
    case ResponseFormat::Type::kJsonSchema: {
      // Parsed keeping the client's property order, the order the output uses.
      absl::StatusOr<std::shared_ptr<JsonConstraint>> schema =
          json_->Schema(nlohmann::ordered_json::parse(r.response_format.schema));
      if (!schema.ok()) {
        absl::Status s = schema.status();
        s.SetPayload(kParamPayload, absl::Cord("response_format"));
        return s;
      }
      c = *std::move(schema);
      break;
    }
  }
  // Every byte is a token, so the shortest valid output in bytes is the most
  // tokens it can take: with at least that many, the output always completes
  // (the constraint keeps a way to finish within what is left); with fewer,
  // it might stop cut short, so the request is refused.
  int shortest = 0;
  c->Lookahead("", &shortest);
  if (shortest > r.max_tokens) {
    absl::Status s = absl::InvalidArgumentError(
        absl::StrCat("the shortest output response_format allows is ", shortest,
                     " bytes, which may take as many tokens; max_tokens is ", r.max_tokens));
    s.SetPayload(kParamPayload, absl::Cord("max_tokens"));
    return s;
  }
  return c;
}

ModelLimits HttpServer::ApiLimits() const {
  return ModelLimits{model_.context, model_.vocab_size, options_.model_names};
}

void HttpServer::Generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  std::shared_ptr<void> active = Enter();
  if (draining_) {
    SetError(res, ErrorFromStatus(absl::UnavailableError("the server is shutting down")));
    return;
  }
  absl::StatusOr<CompletionRequest> parsed =
      chat ? ParseChatRequest(req.body, *tokenizer_, ApiLimits())
           : ParseCompletionRequest(req.body, *tokenizer_, ApiLimits());
  if (!parsed.ok()) {
    SetError(res, ErrorFromStatus(parsed.status()));
    return;
  }
  const CompletionRequest& r = *parsed;
  auto g = std::make_shared<Generation>(loop_, tokenizer_, r);
  // Each candidate queues as its own request: more than the queue holds
  // would be refused with 429 however often the client retried.
  if (g->cands.size() > static_cast<size_t>(loop_->max_waiting())) {
    absl::Status s = absl::InvalidArgumentError(absl::StrCat(
        "this request asks for ", g->cands.size(),
        " completions (n or best_of, times its prompts), more than the server queues at once (",
        loop_->max_waiting(), ", --max-waiting)"));
    s.SetPayload(kParamPayload, absl::Cord(r.best_of > r.n ? "best_of" : "n"));
    SetError(res, ErrorFromStatus(s));
    return;
  }
  // The schema compiles once; each candidate walks it with its own state.
  absl::StatusOr<std::shared_ptr<JsonConstraint>> constraint = MakeConstraint(r);
  if (!constraint.ok()) {
    SetError(res, ErrorFromStatus(constraint.status()));
    return;
  }
  // Each candidate is its own engine request.
  for (size_t c = 0; c < g->cands.size(); ++c) {
    EngineRequest& er = g->cands[c].request;
    er.prompt = g->PromptOf(static_cast<int>(c));
    er.max_tokens = r.max_tokens;
    er.sampling = r.sampling;
    er.seed = r.has_seed ? r.seed + c % r.best_of : RandomSeed();
    // best_of ranks candidates by their tokens' log-probabilities.
    er.logprobs = r.best_of > r.n ? std::max(r.logprobs, 0) : r.logprobs;
    // A max_tokens 0 request (echo) is its prompt alone, which the engine
    // answers by scoring the prompt; the scores are sent only with logprobs.
    er.echo_logprobs = r.echo && (r.logprobs >= 0 || r.max_tokens == 0);
    if (*constraint != nullptr) er.constraint = c == 0 ? *constraint : (*constraint)->Fresh();
  }
  // The first candidate of each prompt goes first; the others follow once
  // it has run the prompt (Generation::Advance), so they find its blocks in
  // the prefix cache instead of computing the prompt again each.
  for (size_t c = 0; c < g->cands.size(); ++c) {
    if (!g->Leads(static_cast<int>(c)) && g->Staged(static_cast<int>(c))) continue;
    if (absl::Status s = g->Submit(static_cast<int>(c)); !s.ok()) {
      g->Abandon();
      SetError(res, ErrorFromStatus(s));
      if (s.code() == absl::StatusCode::kResourceExhausted) res.set_header("Retry-After", "1");
      return;
    }
  }
  g->meta.id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", absl::Hex(started_),
                            absl::Hex(next_id_.fetch_add(1), absl::kZeroPad8));
  g->meta.created = static_cast<int64_t>(std::time(nullptr));
  g->meta.model = r.model;
  g->meta.chat = chat;
  g->meta.include_usage = r.include_usage;
  g->socket = ConnectionSocket();

  if (!r.stream) {
    std::vector<ChoiceDelta> whole(g->cands.size());
    while (!g->done()) {
      if (!ConnectionAlive(g->socket)) {
        g->Abandon();
        SetError(res, ClientLeft());  // rather than 200 with nothing
        res.set_header("Connection", "close");
        return;
      }
      for (ChoiceDelta& d : g->Advance()) {
        ChoiceDelta& w = whole[d.index];
        w.text += d.text;
        w.has_logprobs = d.has_logprobs;
        w.finish_reason = d.finish_reason;
        for (LogprobEntry& e : d.logprobs) w.logprobs.push_back(std::move(e));
      }
    }
    if (absl::Status error = g->error(); !error.ok()) {
      SetError(res, ErrorFromStatus(error));
      return;
    }
    for (ChoiceDelta& w : whole) w.has_logprobs = r.logprobs >= 0;
    res.set_content(CompletionJson(g->meta, g->Choices(std::move(whole)), g->usage),
                    "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [g](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        if (g->meta.chat && !g->roles_sent) {
          g->roles_sent = true;
          std::string roles;
          for (size_t c = 0; c < g->cands.size(); ++c) {
            ChoiceDelta d;
            d.index = static_cast<int>(c);
            d.role = true;
            roles += SseEvent(ChunkJson(g->meta, d));
          }
          if (!write(roles)) {
            g->Abandon();
            return false;
          }
          return true;
        }
        for (;;) {
          if (!ConnectionAlive(g->socket)) {
            g->Abandon();
            write(SseEvent(ErrorJson(ClientLeft())));  // fails if it is gone
            return false;
          }
          // Streaming has best_of == n: candidate c is choice c.
          std::string out;
          for (ChoiceDelta& d : g->Advance()) {
            // A choice's last chunk carries its finish_reason and no text,
            // as OpenAI's streams do.
            ChoiceDelta end;
            end.index = d.index;
            end.finish_reason = std::exchange(d.finish_reason, "");
            if (!d.text.empty() || !d.logprobs.empty()) out += SseEvent(ChunkJson(g->meta, d));
            if (!end.finish_reason.empty()) out += SseEvent(ChunkJson(g->meta, end));
          }
          const bool done = g->done();
          if (done) {
            if (absl::Status error = g->error(); !error.ok()) {
              g->Abandon();
              out += SseEvent(ErrorJson(ErrorFromStatus(error)));
            } else if (g->meta.include_usage) {
              out += SseEvent(UsageChunkJson(g->meta, g->usage));
            }
            absl::StrAppend(&out, kSseDone);
          }
          if (!out.empty() && !write(out)) {
            g->Abandon();
            return false;
          }
          if (done) {
            sink.done();
            return true;
          }
          if (!out.empty()) return true;
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
  AppendScalar(&out, "ladder_prompt_tokens_cached_total", "counter",
               "Prompt tokens found in the prefix cache instead of computed.",
               st.prompt_tokens_cached);
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
