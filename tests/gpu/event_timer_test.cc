// The CUDA backend's DeviceTimer (src/backend/cuda/event_timer.h): marks are
// CUDA events on a stream, numbered from the anchor (0); a mark's time is
// measured from the anchor, so two marks around 20 ms of host sleep on an
// idle stream lie 20 ms apart; a new anchor forgets the old marks; an
// unknown mark is OutOfRange.
#include "src/backend/cuda/event_timer.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

class EventTimerTest : public gpu_test::GpuTest {};

TEST_F(EventTimerTest, MarksMeasureFromTheAnchor) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    cuda::EventTimer timer(stream);
    EXPECT_EQ(timer.SinceAnchor(0).status().code(), absl::StatusCode::kOutOfRange);
    ASSERT_TRUE(timer.Anchor().ok());
    const int a = timer.Mark();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int b = timer.Mark();
    EXPECT_EQ(a, 1);
    EXPECT_EQ(b, 2);
    absl::StatusOr<int64_t> ta = timer.SinceAnchor(a), tb = timer.SinceAnchor(b);
    ASSERT_TRUE(ta.ok()) << ta.status();
    ASSERT_TRUE(tb.ok()) << tb.status();
    EXPECT_GE(*ta, 0);
    EXPECT_GE(*tb - *ta, 19'000'000);
    EXPECT_LT(*tb - *ta, 5'000'000'000);
    EXPECT_EQ(timer.SinceAnchor(3).status().code(), absl::StatusCode::kOutOfRange);

    ASSERT_TRUE(timer.Anchor().ok());
    EXPECT_EQ(timer.Mark(), 1);
    EXPECT_EQ(timer.SinceAnchor(2).status().code(), absl::StatusCode::kOutOfRange);
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace ladder
