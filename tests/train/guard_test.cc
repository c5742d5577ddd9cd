// The step guard's verdicts: non-finite values always skip; a spike skips
// only after warm-up and only upward; consecutive skips ask for a rollback.
#include "src/train/guard.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ladder {
namespace {

using V = StepGuard::Verdict;

TEST(GuardTest, NonFiniteAlwaysSkips) {
  StepGuard g;
  EXPECT_EQ(g.Check(std::nan(""), 1.0), V::kNonFinite);
  EXPECT_EQ(g.Check(2.0, INFINITY), V::kNonFinite);
  EXPECT_EQ(g.Check(2.0, 1.0), V::kApply);
}

TEST(GuardTest, SpikesAfterWarmupAndRollbackAfterKBadSteps) {
  StepGuard g({/*spike_z=*/4.0, /*max_bad_steps=*/2});
  for (int i = 0; i < 30; ++i) {
    const double loss = 3.0 + 0.01 * (i % 3);
    if (i < 19) {
      EXPECT_EQ(g.Check(100.0, 1.0), V::kApply) << "judged during warm-up";
    }
    ASSERT_EQ(g.Check(loss, 1.0), V::kApply);
    g.Record(V::kApply, loss);
  }
  EXPECT_EQ(g.Check(2.0, 1.0), V::kApply);  // a drop is no spike
  EXPECT_EQ(g.Check(3.5, 1.0), V::kSpike);
  g.Record(V::kSpike, 3.5);
  EXPECT_FALSE(g.needs_rollback());
  g.Record(V::kNonFinite, NAN);
  EXPECT_TRUE(g.needs_rollback());
  EXPECT_EQ(g.state().skipped, 2);
  g.Record(V::kApply, 3.0);
  EXPECT_FALSE(g.needs_rollback());
}

}  // namespace
}  // namespace ladder
