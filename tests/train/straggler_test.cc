// The straggler detector on synthetic compute times: the median, the
// window, the factor, the wait share, and where an episode starts and ends.
#include "src/train/straggler.h"

#include <vector>

#include "gtest/gtest.h"

namespace ladder {
namespace {

StragglerOptions Options(int window, double factor) {
  StragglerOptions o;
  o.window = window;
  o.factor = factor;
  return o;
}

TEST(StragglerTest, NamesTheRankAboveFactorTimesTheMedianWithItsWaitShare) {
  StragglerDetector d(Options(1, 1.5));
  // Median of {1, 1, 3, 1} is 1; rank 2 is 3x; the step took 4 s, so the
  // others waited 2 s of it: 50%.
  const StragglerDetector::Verdict v = d.Observe({1, 1, 3, 1}, 4);
  ASSERT_TRUE(v.straggler.has_value());
  EXPECT_EQ(v.straggler->rank, 2);
  EXPECT_DOUBLE_EQ(v.straggler->ratio, 3);
  EXPECT_DOUBLE_EQ(v.straggler->wait_share, 0.5);
  EXPECT_TRUE(v.episode_start);
  EXPECT_EQ(v.straggler->Describe(), "rank 2: 3.0x median, waiting cost 50% of the step");
}

TEST(StragglerTest, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  StragglerDetector d(Options(1, 1.5));
  // Sorted {1, 2, 4, 10}: median 3, so rank 3 is 10/3 and rank 2 (4/3) is not named.
  const StragglerDetector::Verdict v = d.Observe({2, 1, 4, 10}, 10);
  ASSERT_TRUE(v.straggler.has_value());
  EXPECT_EQ(v.straggler->rank, 3);
  EXPECT_DOUBLE_EQ(v.straggler->ratio, 10.0 / 3);
  EXPECT_FALSE(StragglerDetector(Options(1, 1.5)).Observe({2, 1, 4, 4.4}, 5).straggler);
}

TEST(StragglerTest, AtOrBelowTheFactorNobodyIsNamed) {
  StragglerDetector d(Options(1, 2.0));
  EXPECT_FALSE(d.Observe({1, 1, 2, 1}, 2).straggler) << "exactly 2x is not above 2x";
  EXPECT_TRUE(d.Observe({1, 1, 2.1, 1}, 2.1).straggler);
  // No work measured (median 0) or one rank: nothing to compare.
  EXPECT_FALSE(StragglerDetector(Options(1, 1.5)).Observe({0, 0, 1}, 1).straggler);
  EXPECT_FALSE(StragglerDetector(Options(1, 1.5)).Observe({5}, 5).straggler);
}

TEST(StragglerTest, JudgesOnlyAFullWindowOfMeans) {
  StragglerDetector d(Options(3, 1.5));
  // One slow step among three is averaged away: rank 1's mean is (4+1+1)/3 = 2, 2x.
  EXPECT_FALSE(d.Observe({1, 4, 1}, 4).straggler) << "the window is not full yet";
  EXPECT_FALSE(d.Observe({1, 1, 1}, 1).straggler);
  StragglerDetector::Verdict v = d.Observe({1, 1, 1}, 1);
  ASSERT_TRUE(v.straggler.has_value());
  EXPECT_DOUBLE_EQ(v.straggler->ratio, 2);
  EXPECT_DOUBLE_EQ(v.straggler->wait_share, 1.0 / 2);  // (2 - 1) / mean step 2
  // The slow step leaves the window: the mean is 1 again.
  EXPECT_FALSE(d.Observe({1, 1, 1}, 1).straggler);
}

TEST(StragglerTest, AnEpisodeStartsOnceAndEndsWhenTheRankRecovers) {
  StragglerDetector d(Options(1, 1.5));
  EXPECT_FALSE(d.Observe({1, 1, 1, 1}, 1).episode_start);
  EXPECT_TRUE(d.Observe({1, 1, 1, 2}, 2).episode_start);
  StragglerDetector::Verdict v = d.Observe({1, 1, 1, 2}, 2);
  EXPECT_TRUE(v.straggler.has_value());
  EXPECT_FALSE(v.episode_start) << "the same episode goes on";
  v = d.Observe({1, 2, 1, 1}, 2);
  ASSERT_TRUE(v.straggler.has_value());
  EXPECT_EQ(v.straggler->rank, 1);
  EXPECT_TRUE(v.episode_start) << "another rank: a new episode";
  v = d.Observe({1, 1, 1, 1}, 1);
  EXPECT_FALSE(v.straggler.has_value());
  EXPECT_FALSE(v.episode_start);
  EXPECT_TRUE(d.Observe({1, 2, 1, 1}, 2).episode_start) << "the episode had ended";
}

TEST(StragglerTest, OptionsAreValidated) {
  EXPECT_EQ(Options(0, 1.5).Validate().message(), "--straggler-window must be at least 1, got 0");
  EXPECT_EQ(Options(5, 1).Validate().message(), "--straggler-factor must be greater than 1, got 1");
  EXPECT_TRUE(Options(5, 1.5).Validate().ok());
}

}  // namespace
}  // namespace ladder
