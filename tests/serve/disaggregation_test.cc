// Prefill/decode disaggregation below HTTP: a request whose prompt ran on a
// prefill server (PrefillServer, reached through RemotePrefill) and was
// admitted with Engine::SubmitPrefilled generates exactly the tokens of the
// same request run by one engine (greedy and seeded sampling, fp32 and int8
// KV, prompts across block boundaries, with speculation too). Mismatched
// KV formats and models are refused at the hello with a clear message; a
// prefill server that is down, or a fake one answering garbage, a bad
// checksum or a truncated frame, fails Prefill with Unavailable naming it;
// garbage sent to a prefill server closes that connection and nothing else.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/core/philox.h"
#include "src/serve/engine.h"
#include "src/serve/engine_loop.h"
#include "src/serve/prefill_server.h"
#include "src/serve/remote_prefill.h"
#include "src/serve/transfer_protocol.h"
#include "tests/model/small_gpt.h"

namespace ladder {
namespace {

using ::testing::HasSubstr;

GptConfig Small() { return SmallGpt(96); }

// The decode side's description of a model in `kv` (fp32 weights, as the
// prefill servers here use).
transfer::PeerModel Peer(const GptConfig& config, KvFormat kv,
                         WeightFormat weights = WeightFormat::kF32) {
  transfer::PeerModel p;
  p.config = config;
  p.weights = weights;
  p.kv = kv;
  return p;
}

std::unique_ptr<Gpt> RandomModel(Backend* be, const GptConfig& cfg, uint64_t seed) {
  auto model = *Gpt::Create(cfg, be, 1, /*training=*/false);
  EXPECT_TRUE(model->InitWeights(seed).ok());
  return model;
}

// A prefill server over `model` serving on its own thread until destroyed.
class PrefillThread {
 public:
  PrefillThread(Gpt* model, KvFormat format) {
    PrefillServer::Options o;
    o.kv_format = format;
    o.max_batch_tokens = 24;  // several chunks for the longer prompts
    server_ = *PrefillServer::Create(model, o);
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Serve().ok()); });
  }
  ~PrefillThread() {
    server_->Shutdown();
    thread_.join();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", server_->port()); }

 private:
  std::unique_ptr<PrefillServer> server_;
  std::thread thread_;
};

// Runs one request to completion; its tokens.
std::vector<int32_t> RunToEnd(Engine* engine, absl::StatusOr<int64_t> id) {
  EXPECT_TRUE(id.ok()) << id.status();
  std::vector<int32_t> out;
  while (!engine->idle()) {
    auto events = engine->Step();
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) break;
    for (const EngineEvent& e : *events) out.push_back(e.token);
  }
  EXPECT_EQ(engine->blocks().used_blocks(), 0);
  return out;
}

EngineRequest Request(int prompt_tokens, float temperature, uint64_t seed) {
  EngineRequest r;
  PhiloxStream rng(seed, 0);
  for (int i = 0; i < prompt_tokens; ++i)
    r.prompt.push_back(static_cast<int32_t>(rng.NextU32() % 256));
  r.max_tokens = 12;
  r.sampling.temperature = temperature;
  r.seed = seed;
  return r;
}

EngineConfig Config(KvFormat format, Gpt* draft = nullptr, int speculate = 0) {
  EngineConfig c;
  c.kv_blocks = 32;
  c.max_batch_tokens = 24;
  c.kv_format = format;
  c.draft = draft;
  c.speculate = speculate;
  return c;
}

TEST(Disaggregation, SameTokensAsOneEngine) {
  CpuBackend be;
  auto model = RandomModel(&be, Small(), 1);
  for (KvFormat format : {KvFormat::kF32, KvFormat::kInt8}) {
    PrefillThread prefill(model.get(), format);
    auto remote = *RemotePrefill::Create(prefill.address(), Peer(model->config(), format));
    ASSERT_TRUE(remote->Check().ok());
    for (int n : {2, 16, 17, 50}) {
      for (float temperature : {0.0f, 1.0f}) {
        SCOPED_TRACE(
            absl::StrCat(KvFormatName(format), " prompt ", n, " temperature ", temperature));
        const EngineRequest r = Request(n, temperature, 100 + n);
        auto local = *Engine::Create(model.get(), Config(format));
        const std::vector<int32_t> want = RunToEnd(local.get(), local->Submit(r));
        ASSERT_EQ(want.size(), 12u);

        absl::StatusOr<std::string> rows = remote->Prefill(r.prompt);
        ASSERT_TRUE(rows.ok()) << rows.status();
        EXPECT_EQ(static_cast<int64_t>(rows->size()),
                  (n - 1) * KvCache::BytesPerToken(model->config(), format));
        auto decode = *Engine::Create(model.get(), Config(format));
        EXPECT_EQ(RunToEnd(decode.get(), decode->SubmitPrefilled(r, *rows)), want);
        // The decode engine ran only the last prompt token, then decoded.
        EXPECT_EQ(decode->stats().target_forwards, 12);

        // With speculation (the target as its own draft), greedy output is
        // the same too. (Sampled speculative output is not compared: one
        // engine's already changes with the batch budget, since draft and
        // target logits computed in different batches differ in the last
        // bits, and a rejection then samples from their tiny difference.)
        if (temperature == 0) {
          auto spec = *Engine::Create(model.get(), Config(format, model.get(), 3));
          EXPECT_EQ(RunToEnd(spec.get(), spec->SubmitPrefilled(r, *rows)), want);
        }
      }
    }
  }
}

TEST(Disaggregation, KvRowsRoundTrip) {
  CpuBackend be;
  const GptConfig cfg = Small();
  for (KvFormat format : {KvFormat::kF32, KvFormat::kInt8}) {
    KvCache a = *KvCache::Create(cfg, &be, 8, format);
    KvCache b = *KvCache::Create(cfg, &be, 8, format);
    const int64_t per_token = KvCache::BytesPerToken(cfg, format);
    std::string rows(20 * per_token, '\0');
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<char>(i * 7 + 3);
    // Written through one block table, read back through another cache's.
    ASSERT_TRUE(a.WriteRows({5, 2}, 20, rows).ok());
    std::string via_a;
    ASSERT_TRUE(a.ReadRows({5, 2}, 20, &via_a).ok());
    EXPECT_EQ(via_a, rows);
    ASSERT_TRUE(b.WriteRows({0, 7}, 20, via_a).ok());
    std::string via_b;
    ASSERT_TRUE(b.ReadRows({0, 7}, 20, &via_b).ok());
    EXPECT_EQ(via_b, rows);

    EXPECT_EQ(a.ReadRows({5}, 20, &via_a).message(),
              "a block table of 1 blocks cannot hold 20 tokens");
    EXPECT_EQ(a.ReadRows({5, 8}, 20, &via_a).message(), "block 8 is outside the cache of 8 blocks");
    EXPECT_EQ(a.WriteRows({5, 2}, 20, "abc").message(),
              absl::StrCat("the rows of 20 tokens take ", 20 * per_token, " bytes, got 3"));
  }
}

TEST(Disaggregation, SubmitPrefilledChecksTheRows) {
  CpuBackend be;
  auto model = RandomModel(&be, Small(), 1);
  auto engine = *Engine::Create(model.get(), Config(KvFormat::kF32));
  absl::StatusOr<int64_t> id = engine->SubmitPrefilled(Request(5, 0, 1), std::string(10, 'x'));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.status().message(),
              HasSubstr("the prefilled rows of 4 tokens take 2048 bytes, got 10"));
}

TEST(Disaggregation, MismatchRefusedAtHello) {
  CpuBackend be;
  auto model = RandomModel(&be, Small(), 1);
  PrefillThread prefill(model.get(), KvFormat::kF32);
  auto int8 = *RemotePrefill::Create(prefill.address(), Peer(model->config(), KvFormat::kInt8));
  absl::Status s = int8->Check();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), absl::StrCat("prefill server ", prefill.address(),
                                      ": KV format mismatch: the decode server uses int8, the "
                                      "prefill server fp32 (start both with the same --kv)"));
  auto int8_weights = *RemotePrefill::Create(
      prefill.address(), Peer(model->config(), KvFormat::kF32, WeightFormat::kInt8));
  EXPECT_EQ(int8_weights->Check().message(),
            absl::StrCat("prefill server ", prefill.address(),
                         ": weight format mismatch: the decode server uses int8, the prefill "
                         "server fp32 (start both with the same --weights)"));
  GptConfig other = Small();
  other.n_layer = 3;
  auto wrong = *RemotePrefill::Create(prefill.address(), Peer(other, KvFormat::kF32));
  absl::StatusOr<std::string> rows = wrong->Prefill({1, 2, 3});
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(rows.status().message(),
              HasSubstr("model mismatch: the decode server's model has 3 layers, 2 heads, width "
                        "32, vocabulary 256, context 96; the prefill server's 2 layers"));
}

TEST(Disaggregation, BadAddresses) {
  for (const char* bad : {"localhost", ":80", "host:0", "host:99999", "host:x"}) {
    auto r = RemotePrefill::Create(bad, Peer(Small(), KvFormat::kF32));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("HOST:PORT")) << bad;
  }
}

// A TCP listener on a free port whose one connection `talk` handles.
class FakePrefill {
 public:
  explicit FakePrefill(std::function<void(int)> talk) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, talk] {
      const int c = accept(fd_, nullptr, nullptr);
      if (c >= 0) {
        talk(c);
        close(c);
      }
    });
  }
  ~FakePrefill() {
    thread_.join();
    close(fd_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_ = -1, port_ = 0;
  std::thread thread_;
};

// The bytes WriteFrame puts on the wire for a kv frame, to send altered.
std::string WireBytes(uint64_t request, const std::string& payload) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::thread w([&] {
    EXPECT_TRUE(transfer::WriteFrame(sv[0], transfer::FrameType::kKv, request, payload).ok());
  });
  std::string wire(transfer::kHeaderBytes + payload.size(), '\0');
  EXPECT_EQ(recv(sv[1], wire.data(), wire.size(), MSG_WAITALL),
            static_cast<ssize_t>(wire.size()));
  w.join();
  close(sv[0]);
  close(sv[1]);
  return wire;
}

// Reads the hello (and answers it) and the prompt frame.
transfer::Frame HelloThenPrompt(int fd) {
  EXPECT_TRUE(transfer::ReadFrame(fd, 1 << 16).ok());
  EXPECT_TRUE(transfer::WriteFrame(fd, transfer::FrameType::kHelloOk, 0, "").ok());
  absl::StatusOr<transfer::Frame> f = transfer::ReadFrame(fd, 1 << 16);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *f : transfer::Frame();
}

// Prefill's error against a fake server that talks like `talk`.
absl::Status PrefillAgainst(std::function<void(int)> talk) {
  FakePrefill fake(std::move(talk));
  auto remote = *RemotePrefill::Create(fake.address(), Peer(Small(), KvFormat::kF32), 2000);
  absl::StatusOr<std::string> rows = remote->Prefill({1, 2, 3});
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kUnavailable) << rows.status();
  EXPECT_THAT(rows.status().message(), HasSubstr(absl::StrCat("prefill server ", fake.address())));
  return rows.status();
}

TEST(Disaggregation, GarbageFromThePrefillSide) {
  const int64_t bytes = 2 * KvCache::BytesPerToken(Small(), KvFormat::kF32);
  EXPECT_THAT(PrefillAgainst([](int fd) {
                // Read the hello first: closing a socket with unread bytes
                // sends a reset, which may discard the junk before the
                // client reads it.
                EXPECT_TRUE(transfer::ReadFrame(fd, 1 << 16).ok());
                const std::string junk(64, '\x5a');
                send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
              }).message(),
              HasSubstr("not a ladder KV transfer frame (magic 0x5a5a5a5a, \"ZZZZ\"), in answer "
                        "to the hello: is it the --transfer-port of a `ladder serve --role "
                        "prefill`?"));
  EXPECT_THAT(PrefillAgainst([](int fd) {
                // A valid frame with the version bumped and its header checksum redone.
                EXPECT_TRUE(transfer::ReadFrame(fd, 1 << 16).ok());
                char h[transfer::kHeaderBytes] = {};
                const uint32_t magic = transfer::kMagic;
                const uint16_t version = transfer::kVersion + 1, type = 2;
                std::memcpy(h, &magic, 4);
                std::memcpy(h + 4, &version, 2);
                std::memcpy(h + 6, &type, 2);
                send(fd, h, sizeof h, MSG_NOSIGNAL);
              }).message(),
              HasSubstr(absl::StrCat("KV transfer protocol version ", transfer::kVersion + 1,
                                     ", expected ", transfer::kVersion)));
  EXPECT_THAT(
      PrefillAgainst([&](int fd) {
        const transfer::Frame p = HelloThenPrompt(fd);
        // Rows whose payload checksum is for other bytes: a frame with
        // one payload byte flipped.
        std::string wire = WireBytes(
            p.request, transfer::EncodeRows(2, std::string(bytes, '\1')));
        wire.back() ^= 1;
        send(fd, wire.data(), wire.size(), MSG_NOSIGNAL);
      }).message(),
      HasSubstr("the frame payload's checksum does not match"));
  EXPECT_THAT(
      PrefillAgainst([&](int fd) {
        const transfer::Frame p = HelloThenPrompt(fd);
        // The header promises the rows; half of them come, then the
        // connection drops (a prefill server killed mid-transfer).
        const std::string payload = transfer::EncodeRows(2, std::string(bytes, '\1'));
        const std::string wire = WireBytes(p.request, payload);
        send(fd, wire.data(), transfer::kHeaderBytes + payload.size() / 2, MSG_NOSIGNAL);
      }).message(),
      HasSubstr("connection closed inside a frame payload"));
  EXPECT_THAT(PrefillAgainst([&](int fd) {
                const transfer::Frame p = HelloThenPrompt(fd);
                ASSERT_TRUE(transfer::WriteFrame(fd, transfer::FrameType::kKv, p.request + 1,
                                                 transfer::EncodeRows(2, std::string(bytes, '\1')))
                                .ok());
              }).message(),
              HasSubstr("the answer is for request"));
  EXPECT_THAT(PrefillAgainst([&](int fd) {
                const transfer::Frame p = HelloThenPrompt(fd);
                ASSERT_TRUE(transfer::WriteFrame(fd, transfer::FrameType::kKv, p.request,
                                                 transfer::EncodeRows(1, "short"))
                                .ok());
              }).message(),
              HasSubstr("is not the rows of 2 tokens"));
}

TEST(Disaggregation, PrefillServerDown) {
  // A port nothing listens on: take a free one and close it.
  std::string address;
  {
    CpuBackend be;
    auto model = RandomModel(&be, Small(), 1);
    PrefillThread prefill(model.get(), KvFormat::kF32);
    address = prefill.address();
  }
  auto remote = *RemotePrefill::Create(address, Peer(Small(), KvFormat::kF32));
  absl::StatusOr<std::string> rows = remote->Prefill({1, 2, 3});
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(rows.status().message(),
              HasSubstr(absl::StrCat("prefill server ", address, ": cannot connect")));

  // Through the engine loop: Submit fails with that error (the HTTP layer's 503).
  CpuBackend be;
  auto model = RandomModel(&be, Small(), 1);
  EngineLoop::Options lo;
  lo.engine = Config(KvFormat::kF32);
  lo.remote_prefill = remote.get();
  auto loop = *EngineLoop::Create(model.get(), lo);
  absl::StatusOr<int64_t> id = loop->Submit(Request(5, 0, 1), [](const LoopEvent&) {});
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(id.status().message(), HasSubstr("cannot connect"));
  // A one-token prompt has nothing to prefill and runs here.
  absl::StatusOr<int64_t> one = loop->Submit(Request(1, 0, 1), [](const LoopEvent&) {});
  EXPECT_TRUE(one.ok()) << one.status();
  // An invalid request gets the engine's 400 verdict, not the prefill server's.
  EngineRequest bad = Request(5, 0, 1);
  bad.prompt[2] = 256;
  EXPECT_EQ(loop->Submit(bad, [](const LoopEvent&) {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  loop->Drain();
}

TEST(Disaggregation, GarbageToThePrefillServer) {
  CpuBackend be;
  auto model = RandomModel(&be, Small(), 1);
  PrefillThread prefill(model.get(), KvFormat::kF32);
  const int port = std::stoi(prefill.address().substr(prefill.address().rfind(':') + 1));
  PhiloxStream rng(5, 0);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    std::string junk(4096, '\0');
    for (char& c : junk) c = static_cast<char>(rng.NextU32());
    if (attempt == 2) junk = std::string(transfer::kHeaderBytes, '\0');  // zeros: a bad magic
    send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    char c;
    EXPECT_LE(recv(fd, &c, 1, 0), 0) << "the server should close the connection";
    close(fd);
  }
  // The server still serves a well-behaved client.
  auto remote = *RemotePrefill::Create(prefill.address(), Peer(model->config(), KvFormat::kF32));
  EXPECT_TRUE(remote->Prefill({1, 2, 3, 4}).ok());
}

}  // namespace
}  // namespace ladder
