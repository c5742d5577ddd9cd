#include "src/core/philox.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace ladder {
namespace {

// Known-answer test from the Random123 distribution (philox4x32-10 kat_vectors).
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  auto zero = Philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
  auto pi =
      Philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(pi[0], 0xd16cfe09u);
  EXPECT_EQ(pi[1], 0x94fdccebu);
  EXPECT_EQ(pi[2], 0x5001e420u);
  EXPECT_EQ(pi[3], 0x24126ea1u);
}

TEST(PhiloxTest, SliceOfNormalStreamEqualsWholeStream) {
  std::vector<float> whole(1001), part(300);
  FillNormal(whole.data(), 0, 1001, 42, 7, 0.0f, 1.0f);
  FillNormal(part.data(), 351, 300, 42, 7, 0.0f, 1.0f);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(part[i], whole[351 + i]) << i;
}

TEST(PhiloxTest, NormalStreamHasRightMoments) {
  const int n = 200000;
  std::vector<float> x(n);
  FillNormal(x.data(), 0, n, 1, 2, 1.0f, 0.5f);
  double mean = 0, var = 0;
  for (float v : x) mean += v;
  mean /= n;
  for (float v : x) var += (v - mean) * (v - mean);
  var /= n;
  EXPECT_NEAR(mean, 1.0, 0.01);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.01);
}

TEST(PhiloxTest, StreamsAndSeedsDiffer) {
  std::vector<float> a(8), b(8), c(8);
  FillNormal(a.data(), 0, 8, 1, 0, 0, 1);
  FillNormal(b.data(), 0, 8, 1, 1, 0, 1);
  FillNormal(c.data(), 0, 8, 2, 0, 0, 1);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

TEST(PhiloxTest, SequentialStreamRestoresFromOffset) {
  PhiloxStream s(5, 9);
  for (int i = 0; i < 13; ++i) s.NextU32();
  PhiloxStream restored(5, 9, s.offset());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.NextU32(), restored.NextU32());
}

}  // namespace
}  // namespace ladder
