#include "src/serve/sampler.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "src/serve/logprobs.h"

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

TEST(SamplerTest, DistributionIsTheFilteredRenormalizedSoftmax) {
  // Top-k 3 keeps ids 1, 4, 2; top-p 0.8 of those keeps 1 and 4.
  const std::vector<double> p = TokenDistribution(kLogits, {0.5, 3, 0.8});
  const double a = std::exp(kLogits[1] / 0.5), b = std::exp(kLogits[4] / 0.5);
  const std::vector<double> want = {0, a / (a + b), 0, 0, b / (a + b)};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(p[i], want[i], 1e-12) << i;
  const std::vector<double> greedy = TokenDistribution(kLogits, {0.0, 0, 1.0});
  EXPECT_EQ(greedy, (std::vector<double>{0, 1, 0, 0, 0}));
}

TEST(SamplerTest, GreedyVerificationAcceptsWhileTheArgmaxAgrees) {
  // Rows' argmaxes: 1, 0, 2. The draft proposed 1 then 3: the first stands,
  // the second is replaced by the target's argmax 0.
  const std::vector<float> rows = {0, 5, 1, 0, 0, /**/ 4, 1, 0, 0, 0, /**/ 0, 0, 9, 0, 0};
  const SamplingParams greedy{0.0, 0, 1.0};
  std::vector<std::vector<double>> q = {{0, 1, 0, 0, 0}, {0, 0, 0, 1, 0}};
  PhiloxStream rng(4, 0);
  Verdict v = VerifyProposals({1, 3}, q, rows, greedy, &rng);
  EXPECT_EQ(v.accepted, 1);
  EXPECT_EQ(v.next, 0);
  q[1] = {1, 0, 0, 0, 0};
  v = VerifyProposals({1, 0}, q, rows, greedy, &rng);
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.next, 2);  // the bonus token
}

// Whatever the draft proposes, the tokens that come out follow the target:
// with fixed rows p0, p1 the first token is distributed as p0, and the
// second (when the first proposal stood) as p1. 4 sigma per frequency.
TEST(SamplerTest, VerificationKeepsTheTargetsDistribution) {
  const std::vector<float> rows = {1.0f,      3.0f, 2.0f, 0.5f, 2.9f,
                                   /**/ 2.0f, 0.0f, 1.0f, 2.5f, 0.1f,
                                   /**/ 0,    0,    0,    0,    0};
  for (const SamplingParams& params : {SamplingParams{1.0, 0, 1.0}, SamplingParams{0.7, 4, 0.9}}) {
    const std::vector<double> p0 =
        TokenDistribution(absl::MakeConstSpan(rows).subspan(0, 5), params);
    const std::vector<double> p1 =
        TokenDistribution(absl::MakeConstSpan(rows).subspan(5, 5), params);
    // A draft that likes the tail: q0 and q1 are reversed logits, hotter.
    const std::vector<float> d0 = {3.0f, 1.0f, 2.0f, 3.5f, 1.1f},
                             d1 = {0.0f, 2.0f, 1.0f, 0.0f, 2.5f};
    const std::vector<std::vector<double>> q = {TokenDistribution(d0, {2.0, 0, 1.0}),
                                                TokenDistribution(d1, {2.0, 0, 1.0})};
    PhiloxStream rng(11, 0);
    const int n = 200000;
    std::vector<int> first(5), second(5);
    int seconds = 0, accepted = 0;
    for (int i = 0; i < n; ++i) {
      const std::vector<int32_t> x = {SampleFrom(q[0], &rng), SampleFrom(q[1], &rng)};
      const Verdict v = VerifyProposals(x, q, rows, params, &rng);
      accepted += v.accepted;
      first[v.accepted > 0 ? x[0] : v.next]++;
      if (v.accepted > 0) {
        second[v.accepted > 1 ? x[1] : v.next]++;
        ++seconds;
      }
    }
    for (int t = 0; t < 5; ++t) {
      EXPECT_NEAR(first[t] / double(n), p0[t], 4 * std::sqrt(p0[t] * (1 - p0[t]) / n) + 1e-9) << t;
      EXPECT_NEAR(second[t] / double(seconds), p1[t],
                  4 * std::sqrt(p1[t] * (1 - p1[t]) / seconds) + 1e-9)
          << t;
    }
    // Both paths ran: some proposals stood, some were replaced.
    EXPECT_GT(accepted, n / 10);
    EXPECT_LT(accepted, 2 * n - n / 10);
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

// Hand-computed: prompt {0, 1}, generated {2, 2, 3}. Repetition 2 divides
// the positive logits of 0, 2, 3 and multiplies the negative one of 1;
// then 2 (twice) loses 2 * 0.5 + 1, 3 (once) 0.5 + 1; then the bias.
TEST(SamplerTest, AdjustmentsFollowTheirDefinitions) {
  SamplingParams p;
  p.repetition_penalty = 2;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 1;
  p.logit_bias = {{4, -100}, {1, 3}};
  TokenHistory h(std::vector<int32_t>{0, 1});
  for (int32_t t : {2, 2, 3}) h.Add(t);
  std::vector<float> l = {1.0f, -1.0f, 3.0f, 0.5f, 2.0f, 0.25f};
  AdjustLogits(p, h, absl::MakeSpan(l));
  const std::vector<float> want = {0.5f, -2.0f + 3, 1.5f - 2, 0.25f - 1.5f, 2.0f - 100, 0.25f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(l[i], want[i]) << i;
  EXPECT_TRUE(p.AdjustsLogits());
  EXPECT_FALSE(SamplingParams().AdjustsLogits());
}

// On random rows, histories and parameters, AdjustLogits (which touches only
// the tokens named) equals the definitions applied over the whole vocabulary.
TEST(SamplerTest, AdjustmentsEqualAWholeVocabularyReference) {
  PhiloxStream rng(21, 0);
  const int V = 97;
  for (int trial = 0; trial < 200; ++trial) {
    SamplingParams p;
    p.repetition_penalty = 0.5 + 1.5 * rng.NextUniform();
    p.frequency_penalty = 4 * rng.NextUniform() - 2;
    p.presence_penalty = 4 * rng.NextUniform() - 2;
    p.logit_bias = {{static_cast<int32_t>(rng.NextU32() % V), 200 * rng.NextUniform() - 100}};
    std::vector<int32_t> prompt, generated;
    for (int i = 0; i < 10; ++i) prompt.push_back(static_cast<int32_t>(rng.NextU32() % V));
    for (int i = 0; i < 15; ++i) generated.push_back(static_cast<int32_t>(rng.NextU32() % 20));
    TokenHistory h(prompt);
    for (int32_t t : generated) h.Add(t);
    std::vector<float> l(V);
    for (float& x : l) x = 8 * rng.NextUniform() - 4;
    std::vector<float> want = l;
    for (int v = 0; v < V; ++v) {
      int count = 0;
      for (int32_t t : generated) count += t == v;
      bool seen = count > 0;
      for (int32_t t : prompt) seen = seen || t == v;
      if (seen) {
        want[v] = static_cast<float>(want[v] > 0 ? want[v] / p.repetition_penalty
                                                 : want[v] * p.repetition_penalty);
      }
      if (count > 0) {
        want[v] = static_cast<float>(want[v] - count * p.frequency_penalty - p.presence_penalty);
      }
      if (v == p.logit_bias[0].first) want[v] = static_cast<float>(want[v] + p.logit_bias[0].second);
    }
    AdjustLogits(p, h, absl::MakeSpan(l));
    EXPECT_EQ(l, want) << trial;
  }
}

TEST(SamplerTest, AdjustmentsOutOfRangeAreNamed) {
  auto message = [](void (*set)(SamplingParams&)) {
    SamplingParams p;
    set(p);
    return std::string(p.Validate().message());
  };
  EXPECT_EQ(message([](SamplingParams& p) { p.presence_penalty = 5; }),
            "presence_penalty must be in [-2, 2], got 5");
  EXPECT_EQ(message([](SamplingParams& p) { p.frequency_penalty = -2.5; }),
            "frequency_penalty must be in [-2, 2], got -2.5");
  EXPECT_EQ(message([](SamplingParams& p) { p.repetition_penalty = 0; }),
            "repetition_penalty must be > 0, got 0");
  EXPECT_EQ(message([](SamplingParams& p) { p.logit_bias = {{7, 101}}; }),
            "logit_bias of token 7 must be in [-100, 100], got 101");
  SamplingParams edge;
  edge.presence_penalty = -2;
  edge.frequency_penalty = 2;
  edge.logit_bias = {{0, -100}, {1, 100}};
  EXPECT_TRUE(edge.Validate().ok());
}

// p = {1, 3, 1, 3} / 8: the top 3 are 1 and 3 (tied, by id), then 0.
TEST(SamplerTest, ScoreTokenIsTheLogSoftmaxWithTiesById) {
  const std::vector<float> l = {0.0f, std::log(3.0f), 0.0f, std::log(3.0f)};
  const TokenLogprob s = ScoreToken(l, 2, 3);
  EXPECT_EQ(s.token, 2);
  EXPECT_NEAR(s.logprob, std::log(1.0 / 8), 1e-6);
  ASSERT_EQ(s.top.size(), 3u);
  EXPECT_EQ(s.top[0].first, 1);
  EXPECT_EQ(s.top[1].first, 3);
  EXPECT_EQ(s.top[2].first, 0);
  EXPECT_NEAR(s.top[0].second, std::log(3.0 / 8), 1e-6);
  EXPECT_NEAR(s.top[2].second, std::log(1.0 / 8), 1e-6);
  EXPECT_TRUE(ScoreToken(l, 0, 0).top.empty());
  EXPECT_EQ(ScoreToken(l, 0, 20).top.size(), 4u);  // at most the vocabulary
}

}  // namespace
}  // namespace ladder
