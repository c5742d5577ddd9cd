// The pipeline schedules as pure functions: every microbatch's forward and
// backward run once per stage, forward first; backwards in microbatch order;
// no stage keeps more microbatches in flight than its activation slots; and
// the slot a microbatch uses is free when its forward starts.
#include "src/parallel/pipeline_parallel/schedule.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ladder::pp {
namespace {

TEST(ScheduleTest, ParsesNamesAndRefusesOthers) {
  EXPECT_EQ(*ParseSchedule("gpipe"), Schedule::kGPipe);
  EXPECT_EQ(*ParseSchedule("1f1b"), Schedule::k1F1B);
  absl::StatusOr<Schedule> bad = ParseSchedule("zigzag");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown pipeline schedule 'zigzag' (gpipe or 1f1b)");
  EXPECT_STREQ(ScheduleName(Schedule::k1F1B), "1f1b");
}

TEST(ScheduleTest, OneFOneBOnFourStagesIsMegatronsOrder) {
  auto text = [](const std::vector<Op>& ops) {
    std::string s;
    for (const Op& op : ops) absl::StrAppend(&s, op.forward ? "F" : "B", op.microbatch, " ");
    return s;
  };
  EXPECT_EQ(text(StageOps(Schedule::k1F1B, 4, 0, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
  EXPECT_EQ(text(StageOps(Schedule::k1F1B, 4, 2, 6)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5 ");
  EXPECT_EQ(text(StageOps(Schedule::k1F1B, 4, 3, 6)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 ");
  EXPECT_EQ(text(StageOps(Schedule::k1F1B, 4, 0, 2)), "F0 F1 B0 B1 ");
  EXPECT_EQ(text(StageOps(Schedule::kGPipe, 2, 1, 3)), "F0 F1 F2 B0 B1 B2 ");
}

TEST(ScheduleTest, EveryScheduleIsCompleteOrderedAndFitsItsSlots) {
  for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B}) {
    for (int P : {1, 2, 3, 4, 8}) {
      for (int M : {1, 2, 3, 4, 8, 13}) {
        for (int stage = 0; stage < P; ++stage) {
          const std::vector<Op> ops = StageOps(s, P, stage, M);
          const int slots = ActivationSlots(s, P, stage, M);
          ASSERT_EQ(ops.size(), 2u * M);
          std::set<int> in_flight, used_slots;
          int next_forward = 0, next_backward = 0;
          for (const Op& op : ops) {
            if (op.forward) {
              ASSERT_EQ(op.microbatch, next_forward++) << ScheduleName(s) << " P" << P;
              // Its slot must not hold a microbatch still waiting for its backward.
              ASSERT_EQ(used_slots.count(op.microbatch % slots), 0u);
              used_slots.insert(op.microbatch % slots);
              in_flight.insert(op.microbatch);
              ASSERT_LE(static_cast<int>(in_flight.size()), slots);
            } else {
              ASSERT_EQ(op.microbatch, next_backward++);
              ASSERT_EQ(in_flight.count(op.microbatch), 1u) << "backward before forward";
              in_flight.erase(op.microbatch);
              used_slots.erase(op.microbatch % slots);
            }
          }
          EXPECT_TRUE(in_flight.empty());
        }
      }
    }
  }
  // 1F1B's memory saving: the first stage keeps P microbatches, not M.
  EXPECT_EQ(ActivationSlots(Schedule::k1F1B, 4, 0, 16), 4);
  EXPECT_EQ(ActivationSlots(Schedule::k1F1B, 4, 3, 16), 1);
  EXPECT_EQ(ActivationSlots(Schedule::kGPipe, 4, 3, 16), 16);
}

TEST(ScheduleTest, TextbookBubble) {
  EXPECT_DOUBLE_EQ(TextbookBubble(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(TextbookBubble(2, 4), 0.2);
  EXPECT_DOUBLE_EQ(TextbookBubble(4, 4), 3.0 / 7.0);
}

TEST(ScheduleTest, ASingleStageRunsThePassesWithoutMessages) {
  std::string trace;
  StageFunctions f;
  f.forward = [&](int m) {
    absl::StrAppend(&trace, "F", m);
    return absl::OkStatus();
  };
  f.backward = [&](int m) {
    absl::StrAppend(&trace, "B", m);
    return absl::OkStatus();
  };
  StageTiming timing;
  ASSERT_TRUE(RunStage(StageOps(Schedule::k1F1B, 1, 0, 3), nullptr, f, &timing).ok());
  EXPECT_EQ(trace, "F0B0F1B1F2B2");
  EXPECT_GE(timing.wall_seconds, timing.compute_seconds);
  // A failing pass stops the schedule with its error.
  f.backward = [](int) { return absl::InternalError("boom"); };
  EXPECT_EQ(RunStage(StageOps(Schedule::kGPipe, 1, 0, 2), nullptr, f, nullptr).message(), "boom");
}

}  // namespace
}  // namespace ladder::pp
