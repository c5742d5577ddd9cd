// The server's connection handling, in process, on a small random-weight
// model and raw TCP clients: idle keep-alive connections and a client that
// trickles its request do not keep others from being answered; a request
// that does not arrive within the request timeout is refused (408) or its
// connection closed; idle connections close after the keep-alive timeout and
// serve further requests until then; a client that closes its sending half
// is taken as gone, and told so if it still reads; a request whose body has
// no certain end is refused at once and its connection closed.
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
using Clock = std::chrono::steady_clock;

// A raw client connection to 127.0.0.1:port (closed on destruction).
class Conn {
 public:
  explicit Conn(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Conn() { close(fd_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool connected() const { return connected_; }
  bool Send(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Closes the sending half only (the client can still read).
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  // Everything received until the server closed (or `timeout` passed).
  std::string ReadToClose(std::chrono::milliseconds timeout) {
    ClosedWithin(timeout);
    return std::exchange(buffer_, "");
  }
  // Reads one response (head and Content-Length body) within `timeout`.
  // Returns its status, or 0 if the connection closed or the time ran out
  // first; the head goes to *head and the body to *body.
  int Read(std::chrono::milliseconds timeout, std::string* body = nullptr,
           std::string* head = nullptr) {
    const auto deadline = Clock::now() + timeout;
    size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(deadline)) return 0;
    }
    std::string h = buffer_.substr(0, head_end + 4);
    const size_t cl = h.find("Content-Length: ");
    const size_t length = cl == std::string::npos ? 0 : std::stoul(h.substr(cl + 16));
    while (buffer_.size() < head_end + 4 + length) {
      if (!Fill(deadline)) return 0;
    }
    if (body != nullptr) *body = buffer_.substr(head_end + 4, length);
    buffer_.erase(0, head_end + 4 + length);
    if (head != nullptr) *head = h;
    return std::stoi(h.substr(9, 3));
  }
  // True once the server has closed the connection (within `timeout`).
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Fill(deadline)) {
    }
    return closed_;
  }

 private:
  // Appends what arrives before `deadline`; false on close or timeout.
  bool Fill(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd_, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char chunk[4096];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  bool connected_ = false;
  bool closed_ = false;
  std::string buffer_;
};

std::string Post(const std::string& path, const std::string& body) {
  return "POST " + path +
         " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}
const char kHealth[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
const std::string kCompletion =
    json({{"prompt", "In the"}, {"max_tokens", 2}, {"temperature", 0}}).dump();

class ConnectionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    cfg_.n_layer = 1;
    cfg_.n_head = 2;
    cfg_.n_embd = 32;
    cfg_.context = 64;
    cfg_.vocab_size = 256;
    model_ = *Gpt::Create(cfg_, &backend_, 1, /*training=*/false);
    ASSERT_TRUE(model_->InitWeights(5).ok());
  }
  void TearDown() override {
    if (!server_) return;
    server_->Shutdown();
    serve_thread_.join();
    EXPECT_TRUE(serve_status_.ok()) << serve_status_;
  }

  void Start(ServerOptions so = {}) {
    EngineLoop::Options lo;
    lo.engine.kv_blocks = 16 * KvBlockPool::BlocksFor(cfg_.context);
    auto loop = EngineLoop::Create(model_.get(), lo);
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    so.host = "127.0.0.1";
    so.port = 0;
    auto server = HttpServer::Create(so, loop_.get(), &tokenizer_, cfg_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    serve_thread_ = std::thread([this] { serve_status_ = server_->Serve(); });
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

// 256 keep-alive connections that made one request and then sit idle, and a
// client that sends its request body a byte every 50 ms, while a normal
// client keeps asking for /health and a small completion on new connections:
// every one of its requests is answered within 1 s.
TEST_F(ConnectionsTest, IdleAndSlowClientsDoNotStarveOthers) {
  ServerOptions so;
  so.keep_alive_timeout = std::chrono::seconds(60);  // the idle ones stay for the whole test
  Start(so);
  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 256; ++i) {
    idle.push_back(std::make_unique<Conn>(server_->port()));
    ASSERT_TRUE(idle.back()->connected());
    ASSERT_TRUE(idle.back()->Send(kHealth));
  }
  for (auto& c : idle) ASSERT_EQ(c->Read(std::chrono::seconds(30)), 200);

  std::atomic<bool> stop{false};
  std::thread slow([&] {
    Conn c(server_->port());
    const std::string request = Post("/v1/completions", kCompletion);
    for (size_t i = 0; i < request.size() && !stop; ++i) {
      if (!c.Send(request.substr(i, 1))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  std::vector<double> ms;
  const auto end = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < end) {
    for (const std::string& request :
         {std::string(kHealth), Post("/v1/completions", kCompletion)}) {
      const auto t0 = Clock::now();
      Conn c(server_->port());
      ASSERT_TRUE(c.connected());
      ASSERT_TRUE(c.Send(request));
      std::string body;
      const int status = c.Read(std::chrono::seconds(30), &body);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      EXPECT_EQ(status, 200) << body;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  slow.join();
  std::sort(ms.begin(), ms.end());
  std::printf("normal client: %zu requests, latency ms: median %.1f, max %.1f\n", ms.size(),
              ms[ms.size() / 2], ms.back());
  EXPECT_LT(ms.back(), 1000.0);
  // The idle connections are still served.
  for (int i = 0; i < 256; i += 51) {
    ASSERT_TRUE(idle[i]->Send(kHealth));
    EXPECT_EQ(idle[i]->Read(std::chrono::seconds(1)), 200);
  }
}

// A request whose head or body is not in within the request timeout gets
// 408 and its connection closes; one whose first line is not in is closed
// unanswered; a request trickled in within the timeout is answered.
TEST_F(ConnectionsTest, LateRequestsTimeOut) {
  ServerOptions so;
  so.request_timeout = std::chrono::milliseconds(400);
  Start(so);
  const std::string request = Post("/v1/completions", kCompletion);
  const size_t head = request.find("\r\n\r\n") + 4;
  {
    Conn c(server_->port());
    ASSERT_TRUE(c.Send(request.substr(0, head + 3)));
    std::string body;
    EXPECT_EQ(c.Read(std::chrono::seconds(10), &body), 408);
    EXPECT_EQ(json::parse(body)["error"]["message"], "the request was not received within 400 ms");
    EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(5)));
  }
  {
    Conn c(server_->port());
    ASSERT_TRUE(c.Send(request.substr(0, head - 10)));
    EXPECT_EQ(c.Read(std::chrono::seconds(10)), 408);
    EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(5)));
  }
  {
    Conn c(server_->port());
    ASSERT_TRUE(c.Send(request.substr(0, 8)));
    EXPECT_EQ(c.Read(std::chrono::seconds(10)), 0);
    EXPECT_TRUE(c.ClosedWithin(std::chrono::milliseconds(0)));
  }
  {
    Conn c(server_->port());
    for (size_t at = 0; at < request.size(); at += request.size() / 3 + 1) {
      ASSERT_TRUE(c.Send(request.substr(at, request.size() / 3 + 1)));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::string body;
    EXPECT_EQ(c.Read(std::chrono::seconds(10), &body), 200) << body;
  }
}

// A connection serves request after request (pipelined ones too) until it
// has been idle for the keep-alive timeout; then the server closes it, as it
// does a connection that never sends anything.
TEST_F(ConnectionsTest, IdleConnectionsCloseAfterKeepAlive) {
  ServerOptions so;
  so.keep_alive_timeout = std::chrono::milliseconds(300);
  Start(so);
  Conn silent(server_->port());
  Conn c(server_->port());
  ASSERT_TRUE(c.Send(kHealth));
  std::string head;
  EXPECT_EQ(c.Read(std::chrono::seconds(10), nullptr, &head), 200);
  EXPECT_NE(head.find("Keep-Alive: timeout=1, max=100"), std::string::npos) << head;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(c.Send(std::string(kHealth) + Post("/v1/completions", kCompletion)));
  EXPECT_EQ(c.Read(std::chrono::seconds(10)), 200);
  std::string body;
  EXPECT_EQ(c.Read(std::chrono::seconds(10), &body), 200);
  EXPECT_EQ(json::parse(body)["usage"]["completion_tokens"], 2);
  const auto idle_from = Clock::now();
  EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_GE(Clock::now() - idle_from, std::chrono::milliseconds(250));
  EXPECT_TRUE(silent.ClosedWithin(std::chrono::seconds(10)));
}

// A client that sends its request and then shuts down its sending half
// looks like one that hung up (POLLRDHUP): its request is cancelled, and
// what it may still read says so, never a 200 with an empty body.
TEST_F(ConnectionsTest, HalfClosedClientIsToldItsRequestWasCancelled) {
  Start();
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "stream" : "whole");
    loop_->Pause();  // the request cannot finish before the hang-up is seen
    Conn c(server_->port());
    ASSERT_TRUE(c.connected());
    json body = {{"prompt", "In the"}, {"max_tokens", 8}, {"stream", stream}};
    ASSERT_TRUE(c.Send(Post("/v1/completions", body.dump())));
    c.ShutdownWrite();
    const std::string got = c.ReadToClose(std::chrono::seconds(30));
    loop_->Resume();
    EXPECT_NE(got.find("the client closed its end of the connection"), std::string::npos) << got;
    if (!stream) {
      EXPECT_EQ(got.substr(0, 12), "HTTP/1.1 400") << got;
    }
  }
}

// The body limit holds however the body comes: a chunked body over it is
// refused with 413 (httplib alone would read it whole) and its connection
// closes; a form-encoded body (curl -d's default type) over httplib's 8 KiB
// cap for forms is told to send JSON, not that it exceeds the limit.
TEST_F(ConnectionsTest, BodyLimitHoldsForChunkedAndFormBodies) {
  ServerOptions so;
  so.max_body_bytes = 32 * 1024;
  Start(so);
  std::string chunked =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  const std::string piece(8192, 'x');
  for (int i = 0; i < 16; ++i) chunked += "2000\r\n" + piece + "\r\n";  // 128 KiB
  chunked += "0\r\n\r\n";
  {
    Conn c(server_->port());
    ASSERT_TRUE(c.Send(chunked));
    std::string body;
    EXPECT_EQ(c.Read(std::chrono::seconds(30), &body), 413) << body;
    EXPECT_NE(body.find("exceeds the limit of 32768 bytes"), std::string::npos) << body;
    EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(10)));
  }
  // The same body in small chunks under the limit is served.
  const std::string ok = kCompletion;
  const std::string small =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
      absl::StrCat(absl::Hex(ok.size())) + "\r\n" + ok + "\r\n0\r\n\r\n";
  {
    Conn c(server_->port());
    ASSERT_TRUE(c.Send(small));
    std::string body;
    EXPECT_EQ(c.Read(std::chrono::seconds(30), &body), 200) << body;
  }
  const std::string form =
      json({{"prompt", "x"}, {"max_tokens", 1}, {"user", std::string(9000, 'u')}}).dump();
  {
    Conn c(server_->port());
    ASSERT_TRUE(
        c.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
               "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
               std::to_string(form.size()) + "\r\n\r\n" + form));
    std::string body;
    EXPECT_EQ(c.Read(std::chrono::seconds(30), &body), 413) << body;
    EXPECT_NE(body.find("send Content-Type: application/json"), std::string::npos) << body;
  }
}

// A request whose body has no certain end is answered at once, without
// waiting for a body (the request timeout here is 60 s; each answer must
// come within 10), and its connection closes: what follows its head, here a
// request for /health, is never answered. A DELETE without a length has no
// body, and a GET may say Content-Length: 0.
TEST_F(ConnectionsTest, RequestsWithoutACertainBodyEndAreRefused) {
  ServerOptions so;
  so.request_timeout = std::chrono::seconds(60);
  Start(so);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  struct Case {
    std::string request;
    int status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {head + "\r\n" + kCompletion, 411,
       "POST needs a Content-Length (or Transfer-Encoding: chunked)"},
      {"PUT /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", 411,
       "PUT needs a Content-Length (or Transfer-Encoding: chunked)"},
      {head + "Content-Length: 0\r\nContent-Length: " + std::to_string(strlen(kHealth)) +
           "\r\n\r\n" + kHealth,
       400, "the request has Content-Length more than once"},
      {head + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + kHealth, 400,
       "the request has both Content-Length and Transfer-Encoding"},
      {head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
       "the request has Transfer-Encoding more than once"},
      {head + "Content-Length: 1e3\r\n\r\n", 400, "Content-Length '1e3' is not a number of bytes"},
      {head + "Content-Length: -1\r\n\r\n", 400, "Content-Length '-1' is not a number of bytes"},
      {head + "Transfer-Encoding: gzip\r\n\r\n", 501,
       "Transfer-Encoding 'gzip' is not supported: send the body chunked or with a "
       "Content-Length"},
      {"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(strlen(kHealth)) +
           "\r\n\r\n" + kHealth,
       400, "a GET request cannot have a body"},
      {"DELETE /v1/models HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
       "DELETE with Transfer-Encoding is not supported"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request.substr(0, c.request.find("\r\n\r\n")));
    Conn conn(server_->port());
    ASSERT_TRUE(conn.Send(c.request));
    std::string body, got_head;
    ASSERT_EQ(conn.Read(std::chrono::seconds(10), &body, &got_head), c.status) << body;
    EXPECT_EQ(json::parse(body)["error"]["message"], c.message);
    EXPECT_NE(got_head.find("Connection: close"), std::string::npos) << got_head;
    EXPECT_TRUE(conn.ClosedWithin(std::chrono::seconds(10)));
    EXPECT_EQ(conn.ReadToClose(std::chrono::milliseconds(0)), "");
  }
  // Well-framed requests on one connection, which stays open between them.
  Conn conn(server_->port());
  for (const std::string& request :
       {std::string("DELETE /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"),
        std::string("GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
        Post("/v1/completions", kCompletion)}) {
    ASSERT_TRUE(conn.Send(request));
    std::string body;
    EXPECT_EQ(conn.Read(std::chrono::seconds(10), &body), request[0] == 'D' ? 405 : 200) << body;
  }
}

TEST_F(ConnectionsTest, BadLimitsAreRefused) {
  EngineLoop::Options lo;
  lo.engine.kv_blocks = KvBlockPool::BlocksFor(cfg_.context);
  auto loop = EngineLoop::Create(model_.get(), lo);
  ASSERT_TRUE(loop.ok()) << loop.status();
  ServerOptions so;
  so.port = 0;
  so.request_timeout = std::chrono::milliseconds(0);
  auto server = HttpServer::Create(so, loop->get(), &tokenizer_, cfg_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().message(),
            "the keep-alive, request and write timeouts must be >= 1 ms, got 5000, 0 and 5000");
  so.request_timeout = std::chrono::seconds(1);
  so.threads = 0;
  server = HttpServer::Create(so, loop->get(), &tokenizer_, cfg_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().message(),
            "threads and requests per connection must be >= 1, got 0 and 100");
}

}  // namespace
}  // namespace ladder
