// SlowLinkCommunicator: each call reaches the carrier, then waits at least
// the alpha-beta time of its algorithm over the link (a sleep never ends
// early), and stats() counts the call's payload; a failed call does not
// wait. ParseSlowLink refuses every malformed spec with the form. The
// carrier is a fake group of four, so no MPI is needed.
#include "src/parallel/slow_link.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/core/timer.h"

namespace ladder {
namespace {

class FakeGroup final : public Communicator {
 public:
  explicit FakeGroup(int* calls) : Communicator(Axis::kTensor, {0, 1, 2, 3}, 1), calls_(calls) {}
  absl::Status AllReduce(Tensor, ReduceOp) override { return Call(); }
  absl::Status ReduceScatter(Tensor, Tensor) override { return Call(); }
  absl::Status AllGather(Tensor, Tensor) override { return Call(); }
  absl::Status Broadcast(Tensor, int) override { return Call(); }
  absl::Status Send(Tensor, int) override { return Call(); }
  absl::Status Recv(Tensor, int) override { return Call(); }
  absl::Status SendRecv(Tensor, int, Tensor, int) override { return Call(); }
  absl::Status Barrier() override { return absl::UnavailableError("peer gone"); }

 private:
  absl::Status Call() {
    ++*calls_;
    return absl::OkStatus();
  }
  int* calls_;
};

TEST(SlowLinkTest, ParsesAxesLatencyAndBandwidth) {
  auto link = ParseSlowLink("tensor,data:20:12.5");
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_TRUE(link->Crosses(Axis::kTensor));
  EXPECT_TRUE(link->Crosses(Axis::kData));
  EXPECT_FALSE(link->Crosses(Axis::kPipeline));
  EXPECT_DOUBLE_EQ(link->latency_s, 20e-6);
  EXPECT_DOUBLE_EQ(link->bytes_per_s, 12.5e9);
  EXPECT_TRUE(ParseSlowLink("")->axes.empty());
  for (const char* bad : {"tensor", "tensor:1", "tensr:1:1", "tensor:-1:1", "tensor:1:0",
                          "tensor:x:1", "tensor:1:1:1", ":1:1"}) {
    const auto parsed = ParseSlowLink(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("AXES:US:GBPS"), std::string::npos) << bad;
  }
}

TEST(SlowLinkTest, EachCallWaitsItsAlphaBetaTime) {
  // 1 ms a step and 1 MB/s, so a 4000-byte buffer is 4 ms on the wire.
  const SlowLink link = *ParseSlowLink("tensor:1000:0.001");
  int calls = 0;
  SlowLinkCommunicator c(std::make_unique<FakeGroup>(&calls), link);
  EXPECT_EQ(c.size(), 4);
  EXPECT_EQ(c.rank(), 1);
  std::vector<float> a(1000), b(250);
  const Tensor whole = Tensor::F32(a.data(), {1000}, Device::kCpu);
  const Tensor block = Tensor::F32(b.data(), {250}, Device::kCpu);
  const double p = 4, n = 4000, alpha = 1e-3, beta = 1e6;
  const struct {
    const char* name;
    std::function<absl::Status()> call;
    double seconds;
    int64_t bytes;
  } cases[] = {
      {"all-reduce", [&] { return c.AllReduce(whole, ReduceOp::kSum); },
       2 * (p - 1) * (alpha + n / (p * beta)), 4000},
      {"reduce-scatter", [&] { return c.ReduceScatter(whole, block); },
       (p - 1) * (alpha + n / (p * beta)), 4000},
      {"all-gather", [&] { return c.AllGather(block, whole); }, (p - 1) * (alpha + n / (p * beta)),
       4000},
      {"broadcast", [&] { return c.Broadcast(whole, 0); }, (p - 1) * alpha + n / beta, 4000},
      {"send", [&] { return c.Send(block, 2); }, alpha + 1000 / beta, 1000},
      {"send-recv", [&] { return c.SendRecv(block, 2, whole, 0); }, alpha + n / beta, 5000},
  };
  int expected_calls = 0;
  for (const auto& k : cases) {
    c.ResetStats();
    ASSERT_TRUE(k.call().ok()) << k.name;
    EXPECT_EQ(calls, ++expected_calls) << k.name;
    EXPECT_GE(c.stats().seconds, k.seconds) << k.name;
    EXPECT_LT(c.stats().seconds, k.seconds + 0.5) << k.name;
    EXPECT_EQ(c.stats().bytes, k.bytes) << k.name;
    EXPECT_EQ(c.stats().calls, 1) << k.name;
  }
  // A failed call is the carrier's error, not waited for or counted.
  c.ResetStats();
  EXPECT_EQ(c.Barrier().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(c.stats().calls, 0);
}

// Started all-reduces share the link: the second's transfer begins when the
// first's ends, so it completes no earlier than two transfer times after the
// start. Until then Test says false; stats count each call once.
TEST(SlowLinkTest, StartedAllReducesQueueOnTheLink) {
  const SlowLink link = *ParseSlowLink("tensor:1000:0.001");  // 1 ms, 1 MB/s
  int calls = 0;
  SlowLinkCommunicator c(std::make_unique<FakeGroup>(&calls), link);
  std::vector<float> a(1000), b(1000);
  const double one = 2 * 3 * (1e-3 + 4000.0 / (4 * 1e6));  // 6 latencies + 6000 bytes: 12 ms
  const Timer timer;
  auto first = c.StartAllReduce(Tensor::F32(a.data(), {1000}, Device::kCpu), ReduceOp::kSum);
  auto second = c.StartAllReduce(Tensor::F32(b.data(), {1000}, Device::kCpu), ReduceOp::kSum);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(calls, 2);  // both on the carrier at once
  const absl::StatusOr<bool> early = (*second)->Test();
  ASSERT_TRUE(early.ok());
  EXPECT_FALSE(*early);
  ASSERT_TRUE((*first)->Wait().ok());
  EXPECT_GE(timer.Seconds(), one);
  ASSERT_TRUE((*second)->Wait().ok());
  EXPECT_GE(timer.Seconds(), 2 * one);
  EXPECT_LT(timer.Seconds(), 2 * one + 0.5);
  EXPECT_EQ(c.stats().calls, 2);
  EXPECT_EQ(c.stats().bytes, 8000);
  const absl::StatusOr<bool> again = (*second)->Test();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again);
  EXPECT_EQ(c.stats().calls, 2);
}

}  // namespace
}  // namespace ladder
