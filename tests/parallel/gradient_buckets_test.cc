// GradientBuckets (src/parallel/data_parallel/gradient_buckets.h) over a fake
// group of two identical ranks (a sum doubles each element, applied when the
// operation completes, after a few tests): the buckets are cut from the end
// of the buffer; without overlap Ready starts nothing and Finish reduces
// every bucket in order; with overlap each bucket starts once the offset has
// passed its beginning, Finish starts the rest and waits; every element is
// summed exactly once either way, and a second step (BeginStep) starts
// afresh.
#include "src/parallel/data_parallel/gradient_buckets.h"

#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ladder::dp {
namespace {

class FakeGroup final : public Communicator {
 public:
  FakeGroup() : Communicator(Axis::kData, {0, 1}, 0) {}
  absl::Status AllReduce(Tensor buf, ReduceOp) override {
    Double(buf);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<PendingOp>> StartAllReduce(Tensor buf, ReduceOp) override {
    if (fail_starts) return absl::UnavailableError("peer gone");
    started.push_back({buf.data, buf.numel()});
    return std::make_unique<Op>(buf);
  }
  absl::Status ReduceScatter(Tensor, Tensor) override { return Unused(); }
  absl::Status AllGather(Tensor, Tensor) override { return Unused(); }
  absl::Status Broadcast(Tensor, int) override { return Unused(); }
  absl::Status Send(Tensor, int) override { return Unused(); }
  absl::Status Recv(Tensor, int) override { return Unused(); }
  absl::Status SendRecv(Tensor, int, Tensor, int) override { return Unused(); }
  absl::Status Barrier() override { return Unused(); }

  std::vector<std::pair<void*, int64_t>> started;  // (data, numel) in start order
  bool fail_starts = false;

 private:
  static void Double(Tensor t) {
    for (int64_t i = 0; i < t.numel(); ++i) static_cast<float*>(t.data)[i] *= 2;
  }
  static absl::Status Unused() { return absl::UnimplementedError("not used"); }
  // Complete on the third test, or at Wait.
  class Op final : public PendingOp {
   public:
    explicit Op(Tensor buf) : buf_(buf) {}
    absl::StatusOr<bool> Test() override {
      if (!done_ && ++tests_ == 3) Complete();
      return done_;
    }
    absl::Status Wait() override {
      if (!done_) Complete();
      return absl::OkStatus();
    }

   private:
    void Complete() {
      Double(buf_);
      done_ = true;
    }
    Tensor buf_;
    int tests_ = 0;
    bool done_ = false;
  };
};

std::vector<float> Ones(int n) { return std::vector<float>(n, 1.0f); }

TEST(GradientBucketsTest, WithoutOverlapFinishReducesEveryBucketFromTheEnd) {
  FakeGroup g;
  std::vector<float> grads = Ones(10);
  GradientBuckets b(&g, Tensor::F32(grads.data(), {10}, Device::kCpu), 4, /*overlap=*/false);
  EXPECT_EQ(b.buckets(), 3);
  b.BeginStep();
  ASSERT_TRUE(b.Ready(0).ok());
  EXPECT_TRUE(g.started.empty());
  ASSERT_TRUE(b.Finish().ok());
  ASSERT_EQ(g.started.size(), 3u);
  EXPECT_EQ(g.started[0], std::make_pair(static_cast<void*>(grads.data() + 6), int64_t{4}));
  EXPECT_EQ(g.started[1], std::make_pair(static_cast<void*>(grads.data() + 2), int64_t{4}));
  EXPECT_EQ(g.started[2], std::make_pair(static_cast<void*>(grads.data()), int64_t{2}));
  EXPECT_EQ(grads, std::vector<float>(10, 2.0f));
  EXPECT_EQ(b.overlapped_seconds(), 0.0);
  EXPECT_GE(b.exposed_seconds(), 0.0);
}

TEST(GradientBucketsTest, WithOverlapABucketStartsOnceTheBackwardHasPassedIt) {
  FakeGroup g;
  std::vector<float> grads = Ones(10);
  GradientBuckets b(&g, Tensor::F32(grads.data(), {10}, Device::kCpu), 4, /*overlap=*/true);
  for (int step = 1; step <= 2; ++step) {
    g.started.clear();
    b.BeginStep();
    ASSERT_TRUE(b.Ready(7).ok());  // [6, 10) is not wholly final yet
    EXPECT_TRUE(g.started.empty());
    ASSERT_TRUE(b.Ready(6).ok());
    ASSERT_EQ(g.started.size(), 1u);
    EXPECT_EQ(g.started[0].first, grads.data() + 6);
    ASSERT_TRUE(b.Ready(3).ok());  // tests [6, 10) a second time
    ASSERT_TRUE(b.Ready(2).ok());  // starts [2, 6); the third test completes [6, 10)
    ASSERT_EQ(g.started.size(), 2u);
    EXPECT_EQ(grads[6], step == 1 ? 2.0f : 4.0f);  // reduced while the "backward" goes on
    EXPECT_EQ(grads[2], step == 1 ? 1.0f : 2.0f);  // still in flight
    ASSERT_TRUE(b.Finish().ok());
    ASSERT_EQ(g.started.size(), 3u);
    EXPECT_EQ(g.started[2].first, grads.data());
    EXPECT_EQ(grads, std::vector<float>(10, step == 1 ? 2.0f : 4.0f));  // each summed once
    EXPECT_GT(b.overlapped_seconds(), 0.0);
  }
}

TEST(GradientBucketsTest, AStartThatFailsIsTheError) {
  FakeGroup g;
  g.fail_starts = true;
  std::vector<float> grads = Ones(10);
  GradientBuckets b(&g, Tensor::F32(grads.data(), {10}, Device::kCpu), 4, /*overlap=*/true);
  b.BeginStep();
  EXPECT_EQ(b.Ready(0).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(b.Finish().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ladder::dp
