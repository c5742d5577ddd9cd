// The HTTP server end to end, in process, on a small random-weight model:
// many concurrent streams each give exactly what the same request gives
// alone; disconnected clients give their KV blocks back; malformed requests
// get 4xx OpenAI errors and the server keeps answering; the API key guards
// every route but /health and /metrics; a full waiting queue answers 429 with Retry-After; a graceful
// shutdown finishes what is in flight.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "src/backend/cpu/cpu_backend.h"
#include "src/serve/engine_loop.h"
#include "src/serve/http_server.h"

namespace ladder {
namespace {

using json = nlohmann::json;

// What a client got for one request.
struct Answer {
  int status = 0;
  httplib::Error error = httplib::Error::Success;
  std::string text;
  std::string finish_reason;
  bool done = false;  // streaming: saw data: [DONE]
  int chunks = 0;
  int null_usage = 0;  // streaming: chunks with "usage": null
  json usage;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    cfg_.n_layer = 2;
    cfg_.n_head = 4;
    cfg_.n_embd = 64;
    cfg_.context = 128;
    cfg_.vocab_size = 256;
    model_ = *Gpt::Create(cfg_, &backend_, 1, /*training=*/false);
    ASSERT_TRUE(model_->InitWeights(5).ok());
  }
  void TearDown() override { Stop(); }

  void Start(ServerOptions so = {}, EngineLoop::Options lo = {}) {
    lo.engine.kv_blocks = 64 * KvBlockPool::BlocksFor(cfg_.context);
    auto loop = EngineLoop::Create(model_.get(), lo);
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    so.host = "127.0.0.1";
    so.port = 0;
    so.model_names = {"tiny"};
    auto server = HttpServer::Create(so, loop_.get(), &tokenizer_, cfg_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    serve_thread_ = std::thread([this] { serve_status_ = server_->Serve(); });
  }
  void Stop() {
    if (!server_) return;
    server_->Shutdown();
    serve_thread_.join();
    EXPECT_TRUE(serve_status_.ok()) << serve_status_;
    server_.reset();
    loop_.reset();
  }

  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    c->set_read_timeout(30, 0);
    return c;
  }

  // Sends a request (streaming or not, per the body) and collects the answer.
  // `abort_after` > 0 closes the connection after that many events, first
  // calling `on_abort`.
  Answer Send(const std::string& path, const json& body, const httplib::Headers& headers = {},
              int abort_after = 0, const std::function<void()>& on_abort = nullptr) const {
    Answer a;
    auto cli = Client();
    const bool stream = body.value("stream", false);
    const bool chat = path == "/v1/chat/completions";
    if (!stream) {
      auto res = cli->Post(path, headers, body.dump(), "application/json");
      a.error = res.error();
      if (!res) return a;
      a.status = res->status;
      if (res->status != 200) return a;
      json j = json::parse(res->body);
      a.text = chat ? j["choices"][0]["message"]["content"].get<std::string>()
                    : j["choices"][0]["text"].get<std::string>();
      a.finish_reason = j["choices"][0]["finish_reason"].get<std::string>();
      a.usage = j["usage"];
      return a;
    }
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = headers;
    req.set_header("Content-Type", "application/json");
    req.body = body.dump();
    std::string buffer;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      buffer.append(data, n);
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
        const std::string event = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (event.rfind("data: ", 0) != 0) continue;
        const std::string data = event.substr(6);
        if (data == "[DONE]") {
          a.done = true;
          continue;
        }
        json j = json::parse(data);
        ++a.chunks;
        if (j.contains("usage")) a.usage = j["usage"];
        if (j.contains("usage") && j["usage"].is_null()) ++a.null_usage;
        if (j["choices"].empty()) continue;
        const json& c = j["choices"][0];
        if (chat) {
          if (c["delta"].contains("content")) a.text += c["delta"]["content"].get<std::string>();
        } else {
          a.text += c["text"].get<std::string>();
        }
        if (!c["finish_reason"].is_null()) a.finish_reason = c["finish_reason"].get<std::string>();
      }
      if (abort_after > 0 && a.chunks >= abort_after) {
        if (on_abort) on_abort();
        return false;
      }
      return true;
    };
    auto res = cli->send(req);
    a.error = res.error();
    if (res) a.status = res->status;
    return a;
  }

  // POSTs a body that must succeed; the parsed answer.
  json PostOk(const std::string& path, const json& body) const {
    auto res = Client()->Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body);
  }

  // The choices of every chunk of a streamed answer, in order.
  std::vector<json> StreamedChoices(const std::string& path, const json& body) const {
    std::vector<json> choices;
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.set_header("Content-Type", "application/json");
    req.body = body.dump();
    std::string buffer;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      buffer.append(data, n);
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
        const std::string event = buffer.substr(6, end - 6);
        buffer.erase(0, end + 2);
        if (event == "[DONE]") continue;
        const json chunk = json::parse(event);
        for (const json& c : chunk["choices"]) choices.push_back(c);
      }
      return true;
    };
    auto res = Client()->send(req);
    EXPECT_TRUE(res);
    if (res) {
      EXPECT_EQ(res->status, 200);
    }
    return choices;
  }

  // A value from GET /metrics (-1 if absent).
  double Metric(const std::string& name) const {
    auto res = Client()->Get("/metrics");
    if (!res || res->status != 200) return -1;
    const std::string needle = "\n" + name + " ";
    const size_t at = res->body.find(needle);
    if (at == std::string::npos) return -1;
    return std::stod(res->body.substr(at + needle.size()));
  }
  // Waits until the metric has the value (false after 20 s).
  bool WaitForMetric(const std::string& name, double want) const {
    for (int i = 0; i < 2000; ++i) {
      if (Metric(name) == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  GptConfig cfg_;
  CpuBackend backend_;
  std::unique_ptr<Gpt> model_;
  Tokenizer tokenizer_ = Tokenizer::ByteLevel();
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<HttpServer> server_;
  std::thread serve_thread_;
  absl::Status serve_status_;
};

const char kText[] =
    "In the beginning God created the heaven and the earth. And the earth was "
    "without form, and void; and darkness was upon the face of the deep.";

// Request i of the mixed workload: both endpoints, greedy and seeded
// sampling, prompts of different lengths, some with stop strings.
std::pair<std::string, json> Workload(int i) {
  const std::string text = kText;
  const std::string prompt = text.substr(i % 20, 1 + (i * 13) % 60);
  json body;
  std::string path;
  if (i % 3 == 0) {
    path = "/v1/chat/completions";
    body["messages"] = json::array(
        {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", prompt}}});
  } else {
    path = "/v1/completions";
    body["prompt"] = prompt;
  }
  body["max_tokens"] = 4 + i % 20;
  if (i % 2 == 0) {
    body["temperature"] = 0;
  } else {
    body["temperature"] = 0.9;
    body["top_p"] = 0.95;
    body["top_k"] = 40;
    body["seed"] = 1000 + i;
  }
  // (A random model writes runs of one byte, and many invalid ones.)
  if (i % 5 == 0) body["stop"] = json::array({"\n\n", "  ", "\xEF\xBF\xBD"});
  body["stream"] = true;
  return {path, body};
}

TEST_F(ServerTest, ConcurrentStreamsMatchSoloRuns) {
  Start();
  constexpr int kRequests = 200, kClients = 32;
  std::vector<Answer> together(kRequests);
  std::atomic<int> next{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < kRequests;) {
        auto [path, body] = Workload(i);
        together[i] = Send(path, body);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  int stopped = 0;
  for (int i = 0; i < kRequests; ++i) {
    auto [path, body] = Workload(i);
    // Alone: the same request, streamed or (every other one) not.
    if (i % 2 == 1) body["stream"] = false;
    const Answer solo = Send(path, body);
    const Answer& t = together[i];
    ASSERT_EQ(t.status, 200) << i << " " << httplib::to_string(t.error);
    EXPECT_TRUE(t.done) << i;
    ASSERT_EQ(solo.status, 200) << i;
    EXPECT_EQ(t.text, solo.text) << i;
    EXPECT_EQ(t.finish_reason, solo.finish_reason) << i;
    EXPECT_TRUE(t.finish_reason == "length" || t.finish_reason == "stop") << i;
    if (t.finish_reason == "stop") ++stopped;
  }
  EXPECT_GT(stopped, 0);  // the stop strings were hit somewhere
  EXPECT_TRUE(WaitForMetric("ladder_kv_blocks_used", 0));
  EXPECT_EQ(Metric("ladder_requests_finished_total{reason=\"error\"}"), 0);
}

TEST_F(ServerTest, StopStringsCutTheText) {
  Start();
  json body = {{"prompt", "In the beginning"}, {"max_tokens", 24}, {"temperature", 0}};
  const Answer full = Send("/v1/completions", body);
  ASSERT_EQ(full.status, 200);
  ASSERT_EQ(full.finish_reason, "length");
  EXPECT_EQ(full.usage["prompt_tokens"], 16);
  EXPECT_EQ(full.usage["completion_tokens"], 24);
  // A stop string taken from the middle of the greedy output (3 bytes; the
  // text may hold U+FFFD, itself 3 bytes).
  const std::string stop = full.text.substr(full.text.size() / 2 / 3 * 3, 3);
  const std::string want = full.text.substr(0, full.text.find(stop));
  body["stop"] = stop;
  for (bool stream : {false, true}) {
    body["stream"] = stream;
    if (stream) body["stream_options"] = {{"include_usage", true}};
    const Answer cut = Send("/v1/completions", body);
    EXPECT_EQ(cut.status, 200);
    EXPECT_EQ(cut.text, want) << stream;
    EXPECT_EQ(cut.finish_reason, "stop") << stream;
    EXPECT_LT(cut.usage["completion_tokens"].get<int>(), 24) << stream;
    // Every chunk but the totals' says "usage": null (OpenAI's streams do).
    if (stream) {
      EXPECT_EQ(cut.null_usage, cut.chunks - 1);
    }
  }
  auto models = Client()->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
}

TEST_F(ServerTest, DisconnectsReturnTheirBlocks) {
  Start();
  // Mid-stream: the engine runs one step at a time until the client has
  // its first chunk (then closes the connection), so the request is surely
  // running, holding blocks, when its client goes away.
  for (int i = 0; i < 4; ++i) {
    const bool chat = i % 2 == 1;
    json body = {{"max_tokens", 120}, {"temperature", 0}, {"stream", true}};
    if (chat) {
      body["messages"] = json::array({{{"role", "user"}, {"content", "Hi"}}});
      body["max_tokens"] = 100;
    } else {
      body["prompt"] = "In the";
    }
    loop_->Pause();
    std::atomic<bool> closing{false};
    Answer a;
    std::thread client([&] {
      // Chat streams start with a chunk carrying only the role.
      a = Send(chat ? "/v1/chat/completions" : "/v1/completions", body, {},
               /*abort_after=*/chat ? 2 : 1, [&] { closing = true; });
    });
    ASSERT_TRUE(WaitForMetric("ladder_requests_waiting", 1));
    for (int step = 0; step < 100 && !closing; ++step) {
      loop_->StepPaused(1);
      for (int w = 0; w < 100 && !closing; ++w) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    client.join();
    ASSERT_TRUE(closing) << i;
    EXPECT_FALSE(a.done) << i;
    EXPECT_TRUE(WaitForMetric("ladder_requests_finished_total{reason=\"cancelled\"}", i + 1)) << i;
    EXPECT_EQ(Metric("ladder_kv_blocks_used"), 0) << i;
    EXPECT_EQ(Metric("ladder_requests_running"), 0) << i;
    loop_->Resume();
  }
  // Non-streaming: the request waits (engine held), the client gives up.
  loop_->Pause();
  {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_read_timeout(0, 300000);
    auto res =
        cli.Post("/v1/completions", R"({"prompt": "abc", "max_tokens": 50})", "application/json");
    EXPECT_FALSE(res);  // timed out
  }
  EXPECT_TRUE(WaitForMetric("ladder_requests_finished_total{reason=\"cancelled\"}", 5));
  EXPECT_EQ(Metric("ladder_requests_waiting"), 0);
  loop_->Resume();
  EXPECT_EQ(Metric("ladder_kv_blocks_used"), 0);
  // Still serving.
  EXPECT_EQ(Send("/v1/completions", {{"prompt", "x"}, {"max_tokens", 3}}).status, 200);
}

struct Malformed {
  std::string method, path, body;
  int status;
  std::string message;  // a substring of error.message
};

TEST_F(ServerTest, MalformedRequestsGetJsonErrors) {
  ServerOptions so;
  so.max_body_bytes = 4096;
  Start(so);
  const std::vector<Malformed> cases = {
      {"POST", "/v1/completions", "{not json", 400, "not valid JSON"},
      {"POST", "/v1/completions", R"({"prompt": 7})", 400, "'prompt' must be a string"},
      {"POST", "/v1/completions", R"({"max_tokens": 7})", 400, "'prompt' is required"},
      {"POST", "/v1/completions", R"({"prompt": "a", "max_tokens": "x"})", 400,
       "'max_tokens' must be an integer"},
      {"POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 0})", 400, "'max_tokens'"},
      {"POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 128})", 400,
       "context of 128 tokens"},
      {"POST", "/v1/completions", R"({"prompt": ")" + std::string(200, 'a') + R"("})", 400,
       "the prompt has 200 tokens"},
      {"POST", "/v1/completions", R"({"prompt": [1, 999]})", 400, "outside the vocabulary"},
      {"POST", "/v1/completions", R"({"prompt": [1, -5]})", 400, "outside the vocabulary"},
      {"POST", "/v1/completions", R"({"prompt": "a", "n": 0})", 400, "'n' must be in [1, 128]"},
      {"POST", "/v1/completions", R"({"prompt": "a", "suffix": "b"})", 400,
       "'suffix' is not supported"},
      {"POST", "/v1/completions", R"({"prompt": "a", "model": "nope"})", 404,
       "The model 'nope' does not exist"},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", 400,
       "'messages[0].role' must be system, developer, user or assistant"},
      {"POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", 400,
       "'tools' is not supported: ladder does not call tools"},
      {"GET", "/v1/models/nope", "", 404, "The model 'nope' does not exist"},
      {"POST", "/v1/embeddings", R"({"input": []})", 400, "'input'"},
      {"POST", "/tokenize", R"({"text": "a"})", 400, "'text' is not supported"},
      {"POST", "/detokenize", R"({"tokens": [999]})", 400, "outside the vocabulary"},
      {"GET", "/tokenize", "", 405, "GET is not allowed"},
      {"POST", "/v1/chat/completions", R"({"messages": {}})", 400, "'messages' must be an array"},
      {"POST", "/v1/completions", R"({"prompt": ")" + std::string(5000, 'a') + R"("})", 413,
       "exceeds the limit of 4096 bytes"},
      {"GET", "/v1/completions", "", 405, "GET is not allowed"},
      {"DELETE", "/v1/models", "", 405, "DELETE is not allowed"},
      {"OPTIONS", "/v1/completions", "", 405, "OPTIONS is not allowed"},
      {"PATCH", "/v1/chat/completions", "{}", 405, "PATCH is not allowed"},
      {"POST", "/v1/models/tiny", "{}", 405, "POST is not allowed"},
      {"POST", "/v1/nope", "{}", 404, "no route for POST /v1/nope"},
      {"GET", "/", "", 404, "no route"},
  };
  for (const Malformed& c : cases) {
    auto cli = Client();
    httplib::Result res = c.method == "GET"       ? cli->Get(c.path)
                          : c.method == "DELETE"  ? cli->Delete(c.path)
                          : c.method == "OPTIONS" ? cli->Options(c.path)
                          : c.method == "PATCH"   ? cli->Patch(c.path, c.body, "application/json")
                                                  : cli->Post(c.path, c.body, "application/json");
    ASSERT_TRUE(res) << c.method << " " << c.path << " " << c.body.substr(0, 80);
    EXPECT_EQ(res->status, c.status) << c.body.substr(0, 80);
    json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << res->body;
    ASSERT_TRUE(j.contains("error")) << res->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.message), std::string::npos)
        << res->body << " (want '" << c.message << "')";
    EXPECT_TRUE(j["error"].contains("type"));
    auto health = Client()->Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
  }
}

// n, best_of and prompt arrays: each choice is the request that asked for
// it alone (candidate j of a prompt samples with seed + j), indexed prompt
// * n + j, streamed or not.
TEST_F(ServerTest, ChoicesAreTheirSoloRequests) {
  Start();
  auto post = [&](const json& body) { return PostOk("/v1/completions", body); };
  const std::vector<std::string> prompts = {"In the beginning", "And the earth"};
  json body = {{"prompt", prompts}, {"n", 2}, {"max_tokens", 6}, {"temperature", 0.9},
               {"seed", 77}};
  const json many = post(body);
  ASSERT_EQ(many["choices"].size(), 4u);
  int64_t completion_tokens = 0;
  for (int p = 0; p < 2; ++p) {
    for (int j = 0; j < 2; ++j) {
      const json& c = many["choices"][p * 2 + j];
      EXPECT_EQ(c["index"], p * 2 + j);
      const json solo = post({{"prompt", prompts[p]}, {"max_tokens", 6}, {"temperature", 0.9},
                              {"seed", 77 + j}});
      EXPECT_EQ(c["text"], solo["choices"][0]["text"]) << p << " " << j;
      completion_tokens += solo["usage"]["completion_tokens"].get<int64_t>();
    }
  }
  EXPECT_EQ(many["usage"]["prompt_tokens"], prompts[0].size() + prompts[1].size());
  EXPECT_EQ(many["usage"]["completion_tokens"], completion_tokens);

  // Streamed: every chunk names its choice; each choice ends with its reason.
  body["stream"] = true;
  std::map<int, std::string> texts, reasons;
  for (const json& c : StreamedChoices("/v1/completions", body)) {
    texts[c["index"].get<int>()] += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) reasons[c["index"].get<int>()] = c["finish_reason"];
  }
  ASSERT_EQ(texts.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(texts[i], many["choices"][i]["text"]) << i;
    EXPECT_EQ(reasons[i], many["choices"][i]["finish_reason"]) << i;
  }
}

// response_format through the whole server: 100 sampled answers of a
// random model (n = 100, candidate j seeded seed + j), each parses and
// matches the schema, properties in the schema's order; a schema outside
// the subset is a 400 naming response_format.
TEST_F(ServerTest, ResponseFormatAnswersAlwaysParse) {
  Start();
  const std::string schema = R"({"type": "object",
      "properties": {"name": {"type": "string", "maxLength": 6},
                     "age": {"type": "integer"},
                     "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
      "required": ["name", "age"], "additionalProperties": false})";
  // Built in order: the client's property order is the output's.
  nlohmann::ordered_json body = {{"prompt", "Answer:"}, {"n", 100}, {"max_tokens", 48},
                                 {"seed", 11}};
  body["response_format"]["type"] = "json_schema";
  body["response_format"]["json_schema"]["name"] = "person";
  body["response_format"]["json_schema"]["schema"] = nlohmann::ordered_json::parse(schema);
  auto res = Client()->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json answer = json::parse(res->body);
  ASSERT_EQ(answer["choices"].size(), 100u);
  for (const json& c : answer["choices"]) {
    const std::string text = c["text"];
    const nlohmann::ordered_json v = nlohmann::ordered_json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    ASSERT_TRUE(v.is_object()) << text;
    auto it = v.begin();
    ASSERT_EQ(it.key(), "name") << text;
    ASSERT_TRUE(it->is_string()) << text;
    ++it;
    ASSERT_EQ(it.key(), "age") << text;
    ASSERT_TRUE(it->is_number_integer()) << text;
    if (++it != v.end()) {
      ASSERT_EQ(it.key(), "tags") << text;
      ASSERT_TRUE(it->is_array() && it->size() <= 2) << text;
    }
    EXPECT_EQ(c["finish_reason"], "stop") << text;
  }
  // Chat and json_object: one JSON object, streamed.
  json chat = {{"messages", {{{"role", "user"}, {"content", "Reply in JSON."}}}},
               {"max_tokens", 40}, {"seed", 3}, {"response_format", {{"type", "json_object"}}}};
  chat["stream"] = true;
  const Answer a = Send("/v1/chat/completions", chat);
  ASSERT_EQ(a.status, 200);
  const json obj = json::parse(a.text, nullptr, false);
  EXPECT_TRUE(obj.is_object()) << a.text;

  body["response_format"]["json_schema"]["schema"] =
      nlohmann::ordered_json::parse(R"({"type": "string", "pattern": "a+"})");
  res = Client()->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  const json e = json::parse(res->body)["error"];
  EXPECT_EQ(e["param"], "response_format");
  EXPECT_NE(e["message"].get<std::string>().find("unsupported keyword 'pattern'"),
            std::string::npos)
      << e;

  // max_tokens below the shortest valid output ({"name":"","age":0}, 19
  // bytes; "{}" for json_object) could end the text cut short: refused.
  body["response_format"]["json_schema"]["schema"] = nlohmann::ordered_json::parse(schema);
  body["max_tokens"] = 18;
  nlohmann::ordered_json object = {{"prompt", "Answer:"}, {"max_tokens", 1}};
  object["response_format"]["type"] = "json_object";
  for (const auto& [request, bytes] : {std::pair{body, 19}, std::pair{object, 2}}) {
    res = Client()->Post("/v1/completions", request.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body;
    const json short_error = json::parse(res->body)["error"];
    EXPECT_EQ(short_error["param"], "max_tokens") << short_error;
    EXPECT_NE(short_error["message"].get<std::string>().find(
                  absl::StrCat("response_format allows is ", bytes, " bytes")),
              std::string::npos)
        << short_error;
  }
  body["max_tokens"] = 19;
  body["n"] = 4;
  res = Client()->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json fits = json::parse(res->body);
  ASSERT_EQ(fits["choices"].size(), 4u);
  for (const json& c : fits["choices"]) {
    EXPECT_FALSE(json::parse(c["text"].get<std::string>(), nullptr, false).is_discarded()) << c;
  }
}

// Log-probabilities: greedy tokens are their own top choice; the streamed
// entries equal the whole answer's; an echoed prompt's scores (max_tokens 0)
// equal what generating its last token reports when a bias forces it.
TEST_F(ServerTest, LogprobsAndEcho) {
  Start();
  const json c = PostOk("/v1/completions",
                      {{"prompt", "In the beginning"}, {"max_tokens", 6}, {"temperature", 0},
                       {"logprobs", 2}});
  const json& lp = c["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u);
  std::string joined;
  for (size_t i = 0; i < 6; ++i) {
    const json& top = lp["top_logprobs"][i];
    ASSERT_EQ(top.size(), 2u);
    // Greedy takes the most likely token: its log-probability is the top one.
    double best = -1e9;
    for (auto it = top.begin(); it != top.end(); ++it) best = std::max(best, it->get<double>());
    EXPECT_EQ(lp["token_logprobs"][i].get<double>(), best) << i;
    EXPECT_LE(best, 0.0);
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += lp["tokens"][i].get<std::string>();
  }

  // Streamed chat: the entries of every chunk add up to the whole answer's.
  json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 8},
               {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}};
  const json whole = PostOk("/v1/chat/completions", chat);
  const json& content = whole["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(content.empty());
  EXPECT_EQ(content[0]["top_logprobs"].size(), 3u);
  chat["stream"] = true;
  json streamed = json::array();
  for (const json& c : StreamedChoices("/v1/chat/completions", chat)) {
    if (c["logprobs"].is_null()) continue;
    for (const json& e : c["logprobs"]["content"]) streamed.push_back(e);
  }
  // (The same tokens; their scores agree to float rounding, as the prompt's
  // prefix is cached the second time and its rows come from another batch.)
  ASSERT_EQ(streamed.size(), content.size());
  for (size_t i = 0; i < content.size(); ++i) {
    EXPECT_EQ(streamed[i]["token"], content[i]["token"]) << i;
    EXPECT_NEAR(streamed[i]["logprob"].get<double>(), content[i]["logprob"].get<double>(), 1e-4);
    EXPECT_EQ(streamed[i]["top_logprobs"].size(), 3u);
  }

  // echo + max_tokens 0 scores the prompt; its last token's score is what
  // generating that token after the rest reports (bias does not change
  // log-probabilities, which are the model's own).
  const std::string prompt = "And God said";
  const json echo = PostOk("/v1/completions", {{"prompt", prompt}, {"max_tokens", 0},
                                             {"echo", true}, {"logprobs", 1}});
  const json& e = echo["choices"][0];
  EXPECT_EQ(e["text"], prompt);
  EXPECT_EQ(echo["usage"]["completion_tokens"], 0);
  ASSERT_EQ(e["logprobs"]["tokens"].size(), prompt.size());
  EXPECT_TRUE(e["logprobs"]["token_logprobs"][0].is_null());
  const int last = static_cast<unsigned char>(prompt.back());
  const json forced = PostOk("/v1/completions",
                           {{"prompt", prompt.substr(0, prompt.size() - 1)}, {"max_tokens", 1},
                            {"temperature", 0}, {"logprobs", 0},
                            {"logit_bias", {{std::to_string(last), 100}}}});
  ASSERT_EQ(forced["choices"][0]["text"], std::string(1, prompt.back()));
  EXPECT_NEAR(forced["choices"][0]["logprobs"]["token_logprobs"][0].get<double>(),
              e["logprobs"]["token_logprobs"][prompt.size() - 1].get<double>(), 1e-4);
  // Without logprobs, the same request is the prompt alone, with no scores.
  for (bool stream : {false, true}) {
    const json plain = {{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"stream", stream}};
    const Answer a = Send("/v1/completions", plain);
    EXPECT_EQ(a.status, 200) << stream;
    EXPECT_EQ(a.text, prompt) << stream;
    EXPECT_EQ(a.finish_reason, "length") << stream;
  }
  EXPECT_TRUE(
      PostOk("/v1/completions",
             {{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}})["choices"][0]["logprobs"]
          .is_null());

  // best_of: the candidate (seed + j) with the highest mean log-probability.
  const json best = PostOk("/v1/completions", {{"prompt", prompt}, {"max_tokens", 5},
                                             {"best_of", 3}, {"seed", 5}});
  EXPECT_TRUE(best["choices"][0]["logprobs"].is_null());
  double top_mean = -1e9;
  std::string top_text;
  for (int j = 0; j < 3; ++j) {
    const json one = PostOk("/v1/completions", {{"prompt", prompt}, {"max_tokens", 5},
                                              {"seed", 5 + j}, {"logprobs", 0}});
    double sum = 0;
    const json& lps = one["choices"][0]["logprobs"]["token_logprobs"];
    for (const json& v : lps) sum += v.get<double>();
    if (sum / lps.size() > top_mean) {
      top_mean = sum / lps.size();
      top_text = one["choices"][0]["text"];
    }
  }
  EXPECT_EQ(best["choices"][0]["text"], top_text);
  EXPECT_EQ(best["usage"]["completion_tokens"], 15);
}

TEST_F(ServerTest, Embeddings) {
  Start();
  auto embed = [&](const json& body) { return PostOk("/v1/embeddings", body); };
  const json two = embed({{"input", {"In the beginning", "God"}}, {"model", "tiny"}});
  ASSERT_EQ(two["data"].size(), 2u);
  EXPECT_EQ(two["usage"]["prompt_tokens"], 16 + 3);
  std::vector<float> first;
  for (const json& d : two["data"]) {
    ASSERT_EQ(d["embedding"].size(), static_cast<size_t>(cfg_.n_embd));
    double norm = 0;
    for (const json& v : d["embedding"]) norm += v.get<double>() * v.get<double>();
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
  for (const json& v : two["data"][1]["embedding"]) first.push_back(v.get<float>());
  // The same text alone, and as base64: the same vector.
  const json b64 = embed({{"input", "God"}, {"encoding_format", "base64"}});
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(b64["data"][0]["embedding"].get<std::string>(), &bytes));
  ASSERT_EQ(bytes.size(), first.size() * sizeof(float));
  std::vector<float> again(first.size());
  std::memcpy(again.data(), bytes.data(), bytes.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_NEAR(again[i], first[i], 1e-6) << i;
}

// The candidates of one prompt share its prefill: the first runs the
// prompt, the others start after its cached blocks (the block of the
// prompt's last token is never shared).
TEST_F(ServerTest, ChoicesShareThePromptsPrefill) {
  Start();
  const std::string prompt(40, 'x');
  const json body = {{"prompt", prompt}, {"n", 4}, {"max_tokens", 3}, {"temperature", 0}};
  auto res = Client()->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json a = json::parse(res->body);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(a["choices"][i]["text"], a["choices"][0]["text"]);
  EXPECT_EQ(Metric("ladder_prompt_tokens_cached_total"), 3 * 32);
  EXPECT_EQ(Metric("ladder_prompt_tokens_total"), 4 * 40);
}

TEST_F(ServerTest, ModelsAndTokenizerRoutes) {
  Start();
  auto models = Client()->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
  auto one = Client()->Get("/v1/models/tiny");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body)["id"], "tiny");
  auto missing = Client()->Get("/v1/models/gpt-4");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["code"], "model_not_found");

  auto tok = Client()->Post("/tokenize", R"({"prompt": "Hi!"})", "application/json");
  ASSERT_TRUE(tok);
  ASSERT_EQ(tok->status, 200) << tok->body;
  const json t = json::parse(tok->body);
  EXPECT_EQ(t["tokens"], json({'H', 'i', '!'}));
  EXPECT_EQ(t["count"], 3);
  EXPECT_EQ(t["max_model_len"], cfg_.context);
  auto detok = Client()->Post("/detokenize", json({{"tokens", t["tokens"]}}).dump(),
                              "application/json");
  ASSERT_TRUE(detok);
  ASSERT_EQ(detok->status, 200) << detok->body;
  EXPECT_EQ(json::parse(detok->body)["prompt"], "Hi!");
}

TEST_F(ServerTest, ApiKeyGuardsAllButHealthAndMetrics) {
  ServerOptions so;
  so.api_key = "sekret";
  Start(so);
  const json body = {{"prompt", "hi"}, {"max_tokens", 2}};
  for (const httplib::Headers& h :
       {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}},
        httplib::Headers{{"Authorization", "sekret"}},
        httplib::Headers{{"Authorization", "Bearer SEKRET"}},
        httplib::Headers{{"Authorization", "Bearer sekretsekret"}}}) {
    auto res = Client()->Post("/v1/completions", h, body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
    EXPECT_EQ(json::parse(res->body)["error"]["code"], "invalid_api_key");
    auto models = Client()->Get("/v1/models", h);
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 401);
    auto tokenize = Client()->Post("/tokenize", h, R"({"prompt": "a"})", "application/json");
    ASSERT_TRUE(tokenize);
    EXPECT_EQ(tokenize->status, 401);
  }
  const httplib::Headers ok = {{"Authorization", "Bearer sekret"}};
  EXPECT_EQ(Send("/v1/completions", body, ok).status, 200);
  // The scheme's name is case-insensitive; the key is not (above).
  EXPECT_EQ(Send("/v1/completions", body, {{"Authorization", "bearer sekret"}}).status, 200);
  auto health = Client()->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = Client()->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

TEST_F(ServerTest, FullQueueAnswers429) {
  EngineLoop::Options lo;
  lo.max_waiting = 2;
  lo.engine.max_running = 1;
  Start({}, lo);
  loop_->Pause();  // nothing runs: accepted requests stay waiting
  std::vector<std::thread> waiting;
  std::vector<Answer> answers(2);
  for (int i = 0; i < 2; ++i) {
    waiting.emplace_back([&, i] {
      answers[i] = Send("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 3}});
    });
  }
  ASSERT_TRUE(WaitForMetric("ladder_requests_waiting", 2));
  auto res = Client()->Post("/v1/completions", R"({"prompt": "hi"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(res->body)["error"]["type"], "rate_limit_error");
  // A request of more candidates than the queue holds could never be
  // admitted: 400 naming n, not 429.
  auto many = Client()->Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 1, "n": 3})",
                             "application/json");
  ASSERT_TRUE(many);
  EXPECT_EQ(many->status, 400);
  EXPECT_EQ(json::parse(many->body)["error"]["param"], "n") << many->body;
  loop_->Resume();
  for (std::thread& t : waiting) t.join();
  for (const Answer& a : answers) EXPECT_EQ(a.status, 200);
}

TEST_F(ServerTest, ShutdownFinishesStreamsInFlight) {
  Start();
  loop_->Pause();  // the request is accepted but cannot finish before the shutdown
  Answer a;
  std::thread client([&] {
    a = Send("/v1/completions",
             {{"prompt", "In the"}, {"max_tokens", 60}, {"temperature", 0}, {"stream", true}});
  });
  ASSERT_TRUE(WaitForMetric("ladder_requests_waiting", 1));
  Stop();  // drains (and so resumes the loop)
  client.join();
  EXPECT_EQ(a.status, 200);
  EXPECT_TRUE(a.done);
  EXPECT_EQ(a.finish_reason, "length");
}

}  // namespace
}  // namespace ladder
