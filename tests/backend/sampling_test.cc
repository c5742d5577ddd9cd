// Backend::SampleTokens on every backend of backend_test_util.h (cpu,
// cuda-sim, and cuda where a GPU is usable) against the reference of
// src/backend/token_sampling.h, on fresh random logits.
//
// What each asserts:
//  - greedy: the argmax of the row's real columns, the lowest id among equal
//    maxima, whatever sits in the padding columns; exactly, on every backend.
//  - sampling: for temperatures, top-k and top-p over their range (the cut
//    at 1, inside, and past the vocabulary), on rows with distinct logits
//    and on rows of many ties (the ranking's tie-break by id), the token
//    equals SampleTokenReference's for the same uniform. The contract allows
//    a device to differ only where rounding puts the uniform within a few
//    ulp of a boundary, which random uniforms in these tests hit with
//    probability far below 1e-9, so any difference is a bug.
//  - the ends of the draw: uniform 0 takes the first kept token in id
//    order, a uniform just below 1 the last one.
//  - bad arguments: InvalidArgument naming the field, the ids untouched.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/token_sampling.h"
#include "tests/backend/backend_test_util.h"

namespace ladder {
namespace {

using testing_backends::BackendTest;

class SampleTokensTest : public BackendTest {
 protected:
  // N rows of Vp columns: V real ones, then padding holding huge logits
  // that no draw may take. `ties` rounds the logits to whole numbers so
  // many are equal.
  std::vector<float> RandomLogits(int N, int V, int Vp, bool ties, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.f, 3.f);
    std::vector<float> x(static_cast<size_t>(N) * Vp);
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < Vp; ++v) {
        float l = normal(rng);
        if (ties) l = std::round(l);
        x[static_cast<size_t>(n) * Vp + v] = v < V ? l : 1e30f;
      }
    }
    return x;
  }

  // Draws every spec on the backend and with the reference; asserts equal.
  void ExpectReference(const std::vector<float>& logits, int N, int V, int Vp,
                       const std::vector<TokenSampleSpec>& specs) {
    auto d = Up(logits, {N, Vp});
    std::vector<int32_t> got(specs.size(), -7);
    const absl::Status s = be().SampleTokens(d.t(), V, specs, absl::MakeSpan(got));
    ASSERT_TRUE(s.ok()) << s;
    for (size_t j = 0; j < specs.size(); ++j) {
      const TokenSampleSpec& sp = specs[j];
      const absl::Span<const float> row(logits.data() + sp.row * Vp, V);
      EXPECT_EQ(got[j], SampleTokenReference(row, sp))
          << "spec " << j << ": row " << sp.row << ", temperature " << sp.temperature << ", top_k "
          << sp.top_k << ", top_p " << sp.top_p << ", uniform " << sp.uniform;
    }
  }
};

TEST_P(SampleTokensTest, GreedyIsTheArgmaxWithTiesToTheLowestId) {
  const int N = 5, V = 1000, Vp = 1024;
  std::vector<float> x = RandomLogits(N, V, Vp, /*ties=*/true, 11);
  // Row 1: the max three times; row 2: all -inf but one; row 3: +0 and -0
  // as the only maxima (equal: the lower id wins).
  x[1 * Vp + 700] = x[1 * Vp + 3] = x[1 * Vp + 999] = 50.f;
  for (int v = 0; v < V; ++v) x[2 * Vp + v] = -std::numeric_limits<float>::infinity();
  x[2 * Vp + 512] = -1e20f;
  for (int v = 0; v < V; ++v) x[3 * Vp + v] = -1.f;
  x[3 * Vp + 40] = -0.f;
  x[3 * Vp + 20] = 0.f;
  x[3 * Vp + 10] = -0.f;
  std::vector<TokenSampleSpec> specs;
  for (int64_t r : {3, 0, 1, 2, 4, 1}) specs.push_back(TokenSampleSpec{r, 0, 0, 1.0, 0.5});
  ExpectReference(x, N, V, Vp, specs);
  auto d = Up(x, {N, Vp});
  std::vector<int32_t> got(specs.size());
  ASSERT_TRUE(be().SampleTokens(d.t(), V, specs, absl::MakeSpan(got)).ok());
  EXPECT_EQ(got[0], 10);
  EXPECT_EQ(got[2], 3);
  EXPECT_EQ(got[3], 512);
}

TEST_P(SampleTokensTest, DrawsEqualTheReference) {
  const int N = 6, V = 3001, Vp = 3008;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (bool ties : {false, true}) {
    const std::vector<float> x = RandomLogits(N, V, Vp, ties, ties ? 21 : 22);
    std::vector<TokenSampleSpec> specs;
    for (double temperature : {0.3, 1.0, 2.5}) {
      for (int top_k : {0, 1, 7, 200, V, V + 5}) {
        for (double top_p : {1.0, 0.95, 0.5, 0.01}) {
          const int64_t row = static_cast<int64_t>(specs.size() % N);
          specs.push_back(TokenSampleSpec{row, temperature, top_k, top_p, uniform(rng)});
        }
      }
    }
    SCOPED_TRACE(ties ? "rows of many ties" : "distinct logits");
    ExpectReference(x, N, V, Vp, specs);
  }
}

TEST_P(SampleTokensTest, TheUniformsEndsTakeTheFirstAndLastKeptTokens) {
  const int N = 1, V = 500, Vp = 512;
  const std::vector<float> x = RandomLogits(N, V, Vp, false, 31);
  const double below_one = std::nextafter(1.0, 0.0);
  std::vector<TokenSampleSpec> specs;
  for (double u : {0.0, below_one}) {
    specs.push_back(TokenSampleSpec{0, 1.0, 0, 1.0, u});
    specs.push_back(TokenSampleSpec{0, 0.7, 10, 1.0, u});
    specs.push_back(TokenSampleSpec{0, 1.3, 0, 0.3, u});
  }
  ExpectReference(x, N, V, Vp, specs);
  // Without a cut every token has weight: 0 takes id 0, just below 1 the last.
  auto d = Up(x, {N, Vp});
  std::vector<int32_t> got(specs.size());
  ASSERT_TRUE(be().SampleTokens(d.t(), V, specs, absl::MakeSpan(got)).ok());
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[3], V - 1);
}

TEST_P(SampleTokensTest, BadArgumentsAreRefusedAndNothingIsWritten) {
  const int N = 2, V = 100, Vp = 128;
  auto d = Up(RandomLogits(N, V, Vp, false, 41), {N, Vp});
  const TokenSampleSpec good{1, 1.0, 5, 0.9, 0.25};
  struct Case {
    TokenSampleSpec spec;
    int vocab;
    size_t ids;
    std::string message;
  };
  TokenSampleSpec row = good, temp = good, top_k = good, top_p = good, u = good;
  row.row = 2;
  temp.temperature = std::nan("");
  top_k.top_k = -1;
  top_p.top_p = 0;
  u.uniform = 1.0;
  const std::vector<Case> cases = {
      {row, V, 1, "row 2 is outside"},        {temp, V, 1, "temperature must be >= 0"},
      {top_k, V, 1, "top_k must be >= 0"},    {top_p, V, 1, "top_p must be in (0, 1]"},
      {u, V, 1, "uniform must be in [0, 1)"}, {good, Vp + 1, 1, "vocab_size 129"},
      {good, 0, 1, "vocab_size 0"},           {good, V, 2, "2 ids for 1 specs"},
  };
  for (const Case& c : cases) {
    std::vector<int32_t> ids(c.ids, -7);
    const std::vector<TokenSampleSpec> specs = {c.spec};
    const absl::Status s = be().SampleTokens(d.t(), c.vocab, specs, absl::MakeSpan(ids));
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
    for (int32_t id : ids) EXPECT_EQ(id, -7);
  }
}

LADDER_INSTANTIATE_ON_ALL_BACKENDS(SampleTokensTest);

}  // namespace
}  // namespace ladder
