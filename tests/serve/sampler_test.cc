#include "src/serve/sampler.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace ladder {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 2.9f};

TEST(SamplerTest, GreedyIsArgmaxAndDrawsNothing) {
  PhiloxStream rng(1, 0);
  EXPECT_EQ(SampleToken(kLogits, {0.0, 0, 1.0}, &rng), 1);
  EXPECT_EQ(rng.offset(), 0u);
}

TEST(SamplerTest, TopKOneAndTinyTopPAreGreedy) {
  PhiloxStream rng(1, 0);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(SampleToken(kLogits, {1.0, 1, 1.0}, &rng), 1);
    EXPECT_EQ(SampleToken(kLogits, {1.0, 0, 1e-6}, &rng), 1);
  }
}

TEST(SamplerTest, TopKNeverPicksOutsideTheK) {
  PhiloxStream rng(2, 0);
  for (int i = 0; i < 500; ++i) {
    int t = SampleToken(kLogits, {5.0, 2, 1.0}, &rng);
    EXPECT_TRUE(t == 1 || t == 4) << t;
  }
}

TEST(SamplerTest, FrequenciesMatchTheSoftmax) {
  PhiloxStream rng(3, 0);
  const int n = 200000;
  std::vector<int> counts(kLogits.size());
  for (int i = 0; i < n; ++i) counts[SampleToken(kLogits, {1.0, 0, 1.0}, &rng)]++;
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  for (size_t i = 0; i < kLogits.size(); ++i) {
    const double p = std::exp(kLogits[i]) / z;
    EXPECT_NEAR(counts[i] / double(n), p, 4 * std::sqrt(p * (1 - p) / n)) << i;
  }
}

TEST(SamplerTest, SameSeedSameTokens) {
  PhiloxStream a(9, 4), b(9, 4);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(SampleToken(kLogits, {0.8, 3, 0.9}, &a), SampleToken(kLogits, {0.8, 3, 0.9}, &b));
  }
}

TEST(SamplerTest, InvalidParamsAreRejected) {
  EXPECT_FALSE((SamplingParams{-1.0, 0, 1.0}).Validate().ok());
  EXPECT_FALSE((SamplingParams{1.0, -2, 1.0}).Validate().ok());
  EXPECT_FALSE((SamplingParams{1.0, 0, 0.0}).Validate().ok());
  EXPECT_FALSE((SamplingParams{1.0, 0, 1.5}).Validate().ok());
  EXPECT_TRUE((SamplingParams{0.0, 0, 1.0}).Validate().ok());
}

}  // namespace
}  // namespace ladder
