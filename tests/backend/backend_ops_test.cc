// Tests of the CPU backend ops (everything but attention, which has its own
// file) against the double-precision references in reference_ops.h.
//
// Tolerances (|got - want| <= rtol * |want| + atol * max|want|, per element):
//  - forward vs double reference:        rtol 1e-5, atol 1e-6
//  - analytical backward vs central differences of the double reference
//    (eps 1e-6, loss L = sum(out * w) for random w):  rtol 1e-4, atol 1e-5
//  - accumulation (+=) vs prefill + fresh gradient:    rtol 1e-6, atol 1e-6
//  - vocabulary shards (T = 2, 4) vs the unsplit op: cross-entropy losses,
//    lse and dlogits rtol 1e-5, atol 1e-6 (only sum_exp's summation order
//    differs); row max, target logit and all embedding results bitwise.
// Determinism claims are checked bitwise (EXPECT_EQ on the raw floats).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "tests/backend/reference_ops.h"

namespace ladder {
namespace {

using ref::Vec;
using Floats = std::vector<float>;
using Ints = std::vector<int32_t>;

constexpr double kFwdRtol = 1e-5, kFwdAtol = 1e-6;
constexpr double kGradRtol = 1e-4, kGradAtol = 1e-5;
constexpr double kAccRtol = 1e-6, kAccAtol = 1e-6;
constexpr double kFdEps = 1e-6;

Floats Uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  Floats x(n);
  for (float& v : x) v = lo + (hi - lo) * static_cast<float>(rng() >> 8) * (1.0f / (1 << 24));
  return x;
}

Ints RandomInts(size_t n, uint32_t seed, int32_t hi) {
  std::mt19937 rng(seed);
  Ints x(n);
  for (int32_t& v : x) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(hi));
  return x;
}

Tensor F32(Floats& v, std::initializer_list<int64_t> dims) {
  return Tensor::F32(v.data(), dims, Device::kCpu);
}
Tensor I32(Ints& v, std::initializer_list<int64_t> dims) {
  return Tensor::I32(v.data(), dims, Device::kCpu);
}

// Per element |got - want| <= rtol |want| + atol max|want|; reports the worst.
::testing::AssertionResult AllClose(const Floats& got, const Vec& want, double rtol, double atol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  int bad = 0;
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    const double tol = rtol * std::fabs(want[i]) + atol * scale;
    if (!(err <= tol)) ++bad;
    if (!(err - tol <= worst_excess)) {
      worst_excess = err - tol;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements out of tolerance; worst at " << worst
         << ": got " << got[worst] << ", want " << want[worst] << " (max|want| " << scale << ")";
}

::testing::AssertionResult BitwiseEqual(const Floats& a, const Floats& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "differ at " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// dL/dx by central differences, L evaluated in double at the perturbed x.
Vec NumericGrad(Vec x, const std::function<double(const Vec&)>& loss) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double old = x[i];
    x[i] = old + kFdEps;
    const double lp = loss(x);
    x[i] = old - kFdEps;
    const double lm = loss(x);
    x[i] = old;
    g[i] = (lp - lm) / (2 * kFdEps);
  }
  return g;
}

// Vec of the float values (exactly representable, so it is the same point).
Vec D(const Floats& x) { return ref::ToDouble(x); }

// Runs `f` with each of 1, 2 and 3 OpenMP threads and checks that the floats
// it returns are bitwise identical.
void ExpectSameForThreadCounts(const std::function<Floats()>& f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Floats one = f();
  for (int nt : {2, 3}) {
    omp_set_num_threads(nt);
    EXPECT_TRUE(BitwiseEqual(f(), one)) << nt << " threads vs 1";
  }
  omp_set_num_threads(saved);
}

void ExpectInvalid(const absl::Status& s, const std::string& op) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(op), std::string::npos) << s;
}

Floats Concat(const Floats& a, const Floats& b) {
  Floats r = a;
  r.insert(r.end(), b.begin(), b.end());
  return r;
}

class BackendOpsTest : public ::testing::Test {
 protected:
  CpuBackend cpu_;
};

// ---- ExpF (the vectorized exp behind GELU and cross-entropy) ---------------

TEST_F(BackendOpsTest, ExpFMatchesExp) {
  double worst = 0;
  for (float x = -87.0f; x < 88.3f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(cpu::ExpF(x) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(cpu::ExpF(0.0f), 1.0f);
  EXPECT_EQ(cpu::ExpF(-100.0f), 0.0f);
  EXPECT_EQ(cpu::ExpF(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::ExpF(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(cpu::ExpF(std::numeric_limits<float>::quiet_NaN())));
}

// ---- embedding ---------------------------------------------------------------

TEST_F(BackendOpsTest, EmbeddingForwardMatchesReference) {
  const int B = 3, T = 5, C = 37, Vp = 11, maxT = 7;
  Ints tok = RandomInts(B * T, 1, Vp);
  Ints pos = ref::SequencePositions(B, T);
  Floats wte = Uniform(Vp * C, 2), wpe = Uniform(maxT * C, 3), out(B * T * C);
  ASSERT_TRUE(cpu_.EmbeddingForward(F32(out, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                                    F32(wte, {Vp, C}), F32(wpe, {maxT, C}), 0)
                  .ok());
  EXPECT_TRUE(AllClose(out, ref::Embedding(tok, pos, C, D(wte), D(wpe)), kFwdRtol, kFwdAtol));
  // No wpe: the token rows alone.
  ASSERT_TRUE(cpu_.EmbeddingForward(F32(out, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                                    F32(wte, {Vp, C}), Tensor(), 0)
                  .ok());
  EXPECT_TRUE(AllClose(out, ref::Embedding(tok, pos, C, D(wte), Vec()), kFwdRtol, kFwdAtol));
}

TEST_F(BackendOpsTest, EmbeddingGradientsMatchFiniteDifferences) {
  const int B = 2, T = 3, C = 5, Vp = 4, maxT = 4;
  Ints tok = {1, 3, 1, 1, 0, 3};  // repeated tokens: the scatter must add them all
  Ints pos = ref::SequencePositions(B, T);
  Floats wte = Uniform(Vp * C, 4), wpe = Uniform(maxT * C, 5), w = Uniform(B * T * C, 6);
  Floats dwte(Vp * C, 0.0f), dwpe(maxT * C, 0.0f);
  ASSERT_TRUE(cpu_.EmbeddingBackward(F32(dwte, {Vp, C}), F32(dwpe, {maxT, C}), F32(w, {B, T, C}),
                                     I32(tok, {B, T}), I32(pos, {B, T}), 0)
                  .ok());
  const Vec wd = D(w);
  auto num_wte = NumericGrad(
      D(wte), [&](const Vec& x) { return ref::Dot(ref::Embedding(tok, pos, C, x, D(wpe)), wd); });
  auto num_wpe = NumericGrad(
      D(wpe), [&](const Vec& x) { return ref::Dot(ref::Embedding(tok, pos, C, D(wte), x), wd); });
  EXPECT_TRUE(AllClose(dwte, num_wte, kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dwpe, num_wpe, kGradRtol, kGradAtol));
}

TEST_F(BackendOpsTest, EmbeddingShardGradientsMatchFiniteDifferences) {
  // A shard holding rows [2, 5) of a 7-row vocabulary, without wpe: tokens
  // outside the shard contribute nothing and get no gradient.
  const int B = 2, T = 4, C = 5, rows = 3, start = 2;
  Ints tok = {0, 2, 4, 6, 3, 2, 5, 1};
  Ints pos = ref::SequencePositions(B, T);
  Floats wte = Uniform(rows * C, 12), w = Uniform(B * T * C, 13), out(B * T * C);
  ASSERT_TRUE(cpu_.EmbeddingForward(F32(out, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                                    F32(wte, {rows, C}), Tensor(), start)
                  .ok());
  EXPECT_TRUE(AllClose(out, ref::Embedding(tok, pos, C, D(wte), Vec(), start), kFwdRtol, kFwdAtol));
  for (int n : {0, 3, 6, 7}) {  // tokens 0, 6, 5, 1: outside the shard
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[n * C + c], 0.0f) << n << "," << c;
  }
  Floats dwte(rows * C, 0.0f);
  ASSERT_TRUE(cpu_.EmbeddingBackward(F32(dwte, {rows, C}), Tensor(), F32(w, {B, T, C}),
                                     I32(tok, {B, T}), I32(pos, {B, T}), start)
                  .ok());
  const Vec wd = D(w);
  EXPECT_TRUE(AllClose(dwte,
                       NumericGrad(D(wte),
                                   [&](const Vec& x) {
                                     return ref::Dot(ref::Embedding(tok, pos, C, x, Vec(), start),
                                                     wd);
                                   }),
                       kGradRtol, kGradAtol));
}

TEST_F(BackendOpsTest, EmbeddingBackwardAccumulatesAndIsDeterministic) {
  const int B = 4, T = 64, C = 80, Vp = 16, maxT = 64;
  Ints tok = RandomInts(B * T, 7, Vp);
  Ints pos = ref::SequencePositions(B, T);
  Floats dout = Uniform(B * T * C, 8);
  const Floats pre_wte = Uniform(Vp * C, 9), pre_wpe = Uniform(maxT * C, 10);
  auto run = [&](const Floats& init_wte, const Floats& init_wpe) {
    Floats dwte = init_wte, dwpe = init_wpe;
    EXPECT_TRUE(cpu_.EmbeddingBackward(F32(dwte, {Vp, C}), F32(dwpe, {maxT, C}),
                                       F32(dout, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}), 0)
                    .ok());
    return Concat(dwte, dwpe);
  };
  const Floats fresh = run(Floats(Vp * C, 0.0f), Floats(maxT * C, 0.0f));
  const Floats acc = run(pre_wte, pre_wpe);
  const Floats pre = Concat(pre_wte, pre_wpe);
  Vec want(pre.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = double{pre[i]} + fresh[i];
  EXPECT_TRUE(AllClose(acc, want, kAccRtol, kAccAtol));
  ExpectSameForThreadCounts([&] { return run(pre_wte, pre_wpe); });
}

// Tensor parallelism's vocabulary-parallel embedding, with a plain loop in
// place of the all-reduce: T shards of Vp/T rows each, wpe on shard 0 only.
// The sum of the shard lookups is the unsplit lookup and each shard's dwte is
// its rows of the unsplit dwte, both bitwise: every element is the same sum
// with zeros added (exact).
TEST_F(BackendOpsTest, EmbeddingShardsSumToTheUnsplitLookup) {
  const int B = 4, T = 64, C = 80, Vp = 16, maxT = 64;  // above the parallel threshold
  Ints tok = RandomInts(B * T, 14, Vp);
  Ints pos = ref::SequencePositions(B, T);
  Floats wte = Uniform(Vp * C, 15), wpe = Uniform(maxT * C, 16), dout = Uniform(B * T * C, 17);
  Floats out(B * T * C), dwte(Vp * C, 0.0f), dwpe(maxT * C, 0.0f);
  ASSERT_TRUE(cpu_.EmbeddingForward(F32(out, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                                    F32(wte, {Vp, C}), F32(wpe, {maxT, C}), 0)
                  .ok());
  ASSERT_TRUE(cpu_.EmbeddingBackward(F32(dwte, {Vp, C}), F32(dwpe, {maxT, C}), F32(dout, {B, T, C}),
                                     I32(tok, {B, T}), I32(pos, {B, T}), 0)
                  .ok());
  for (int shards : {2, 4}) {
    const int rows = Vp / shards;
    Floats sum(B * T * C, 0.0f);
    for (int k = 0; k < shards; ++k) {
      const int start = k * rows;
      Floats w(wte.begin() + start * C, wte.begin() + (start + rows) * C), part(B * T * C);
      Floats dw(rows * C, 0.0f), dp(maxT * C, 0.0f);
      const Tensor pe = k == 0 ? F32(wpe, {maxT, C}) : Tensor();
      const Tensor dpe = k == 0 ? F32(dp, {maxT, C}) : Tensor();
      ASSERT_TRUE(cpu_.EmbeddingForward(F32(part, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                                        F32(w, {rows, C}), pe, start)
                      .ok());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];  // the all-reduce
      ASSERT_TRUE(cpu_.EmbeddingBackward(F32(dw, {rows, C}), dpe, F32(dout, {B, T, C}),
                                         I32(tok, {B, T}), I32(pos, {B, T}), start)
                      .ok());
      EXPECT_TRUE(
          BitwiseEqual(dw, Floats(dwte.begin() + start * C, dwte.begin() + (start + rows) * C)))
          << "shard " << k << " of " << shards;
      if (k == 0) {
        EXPECT_TRUE(BitwiseEqual(dp, dwpe)) << shards << " shards";
      }
    }
    EXPECT_TRUE(BitwiseEqual(sum, out)) << shards << " shards";
  }
}

TEST_F(BackendOpsTest, EmbeddingRejectsBadShapesAndTokens) {
  const int B = 2, T = 3, C = 4, Vp = 5, maxT = 3;
  Ints tok = {0, 1, 2, 3, 4, 0};
  Ints pos = ref::SequencePositions(B, T);
  Floats wte(Vp * C), wpe(maxT * C), out(B * T * C), small_wpe(2 * C);
  EXPECT_TRUE(cpu_.EmbeddingForward(F32(out, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                                    F32(wte, {Vp, C}), F32(wpe, {maxT, C}), 0)
                  .ok());
  ExpectInvalid(cpu_.EmbeddingForward(F32(out, {B, T, C - 1}), I32(tok, {B, T}), I32(pos, {B, T}),
                                      F32(wte, {Vp, C}), F32(wpe, {maxT, C}), 0),
                "EmbeddingForward");
  ExpectInvalid(
      cpu_.EmbeddingForward(F32(out, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                            F32(wte, {Vp, C}), F32(small_wpe, {2, C}), 0),  // position 2 >= maxT
      "EmbeddingForward");
  ExpectInvalid(cpu_.EmbeddingForward(F32(out, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                                      F32(wte, {Vp, C}), F32(wpe, {maxT, C}), -1),
                "vocab_start");
  tok[4] = Vp;  // beyond this shard: legal, it contributes nothing
  EXPECT_TRUE(cpu_.EmbeddingForward(F32(out, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                                    F32(wte, {Vp, C}), F32(wpe, {maxT, C}), 0)
                  .ok());
  tok[4] = -1;  // not a token at all
  ExpectInvalid(cpu_.EmbeddingForward(F32(out, {B, T, C}), I32(tok, {B, T}), I32(pos, {B, T}),
                                      F32(wte, {Vp, C}), F32(wpe, {maxT, C}), 0),
                "EmbeddingForward");
  ExpectInvalid(cpu_.EmbeddingBackward(F32(wte, {Vp, C}), F32(wpe, {maxT, C}), F32(out, {B, T, C}),
                                       I32(tok, {B, T}), I32(pos, {B, T}), 0),
                "EmbeddingBackward");
}

// Explicit positions, as a cached decode step has them: tokens of several
// sequences, each at its own position, in no order, some positions shared
// and some never used.
TEST_F(BackendOpsTest, EmbeddingTakesExplicitPositions) {
  const int N = 9, C = 24, Vp = 13, maxT = 40;
  Ints tok = RandomInts(N, 31, Vp);
  Ints pos = {37, 0, 5, 5, 36, 12, 0, 39, 21};
  Floats wte = Uniform(Vp * C, 32), wpe = Uniform(maxT * C, 33), w = Uniform(N * C, 34);
  Floats out(N * C);
  ASSERT_TRUE(cpu_.EmbeddingForward(F32(out, {N, C}), I32(tok, {N}), I32(pos, {N}),
                                    F32(wte, {Vp, C}), F32(wpe, {maxT, C}), 0)
                  .ok());
  EXPECT_TRUE(AllClose(out, ref::Embedding(tok, pos, C, D(wte), D(wpe)), kFwdRtol, kFwdAtol));

  Floats dwte(Vp * C, 0.0f), dwpe(maxT * C, 0.0f);
  ASSERT_TRUE(cpu_.EmbeddingBackward(F32(dwte, {Vp, C}), F32(dwpe, {maxT, C}), F32(w, {N, C}),
                                     I32(tok, {N}), I32(pos, {N}), 0)
                  .ok());
  const Vec wd = D(w);
  EXPECT_TRUE(AllClose(dwte,
                       NumericGrad(D(wte),
                                   [&](const Vec& x) {
                                     return ref::Dot(ref::Embedding(tok, pos, C, x, D(wpe)), wd);
                                   }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dwpe,
                       NumericGrad(D(wpe),
                                   [&](const Vec& x) {
                                     return ref::Dot(ref::Embedding(tok, pos, C, D(wte), x), wd);
                                   }),
                       kGradRtol, kGradAtol));
  for (int c = 0; c < C; ++c) EXPECT_EQ(dwpe[1 * C + c], 0.0f);  // position 1: no token there

  // No token table: the position rows alone (the int8 model's lookup).
  ASSERT_TRUE(cpu_.EmbeddingForward(F32(out, {N, C}), I32(tok, {N}), I32(pos, {N}), Tensor(),
                                    F32(wpe, {maxT, C}), 0)
                  .ok());
  EXPECT_TRUE(AllClose(out, ref::Embedding(tok, pos, C, Vec(), D(wpe)), kFwdRtol, kFwdAtol));

  // A position outside [0, maxT) is an error in both directions.
  for (int32_t bad : {maxT, -1}) {
    Ints p = pos;
    p[4] = bad;
    ExpectInvalid(cpu_.EmbeddingForward(F32(out, {N, C}), I32(tok, {N}), I32(p, {N}),
                                        F32(wte, {Vp, C}), F32(wpe, {maxT, C}), 0),
                  "positions[4]");
    ExpectInvalid(cpu_.EmbeddingBackward(F32(dwte, {Vp, C}), F32(dwpe, {maxT, C}), F32(w, {N, C}),
                                         I32(tok, {N}), I32(p, {N}), 0),
                  "positions[4]");
  }
  // One position per token.
  ExpectInvalid(cpu_.EmbeddingForward(F32(out, {N, C}), I32(tok, {N}), I32(pos, {N - 1}),
                                      F32(wte, {Vp, C}), F32(wpe, {maxT, C}), 0),
                "positions");
}

// The backward with explicit positions sums each row in token order on any
// thread count, also where many tokens share a position and a token.
TEST_F(BackendOpsTest, EmbeddingBackwardWithPositionsIsDeterministic) {
  const int N = 300, C = 96, Vp = 8, maxT = 6;  // above the parallel threshold
  Ints tok = RandomInts(N, 41, Vp), pos = RandomInts(N, 42, maxT);
  Floats dout = Uniform(N * C, 43);
  auto run = [&] {
    Floats dwte(Vp * C, 0.0f), dwpe(maxT * C, 0.0f);
    EXPECT_TRUE(cpu_.EmbeddingBackward(F32(dwte, {Vp, C}), F32(dwpe, {maxT, C}), F32(dout, {N, C}),
                                       I32(tok, {N}), I32(pos, {N}), 0)
                    .ok());
    return Concat(dwte, dwpe);
  };
  ExpectSameForThreadCounts(run);
}

// ---- residual + LayerNorm ----------------------------------------------------

struct LnData {
  int N, C;
  Floats in, branch, gamma, beta;
  LnData(int n, int c, uint32_t seed)
      : N(n),
        C(c),
        in(Uniform(n * c, seed, -2.0f, 3.0f)),
        branch(Uniform(n * c, seed + 1)),
        gamma(Uniform(c, seed + 2, 0.5f, 1.5f)),
        beta(Uniform(c, seed + 3, -0.5f, 0.5f)) {}
};

// The residual add alone is exactly the fused op's residual_out.
TEST_F(BackendOpsTest, ResidualAddEqualsTheFusedOpsResidual) {
  const int C = 53;
  LnData d(7, C, 5);
  const int N = d.N;
  std::vector<float> sum(N * C), res(N * C), y(N * C), mean(N), rstd(N);
  ASSERT_TRUE(cpu_.ResidualAdd(F32(sum, {N, C}), F32(d.in, {N, C}), F32(d.branch, {N, C})).ok());
  ASSERT_TRUE(cpu_.ResidualLayerNormForward(
                      F32(res, {N, C}), F32(y, {N, C}), F32(mean, {N}), F32(rstd, {N}),
                      F32(d.in, {N, C}), F32(d.branch, {N, C}), F32(d.gamma, {C}), F32(d.beta, {C}))
                  .ok());
  EXPECT_EQ(sum, res);
  for (int i = 0; i < N * C; ++i) ASSERT_EQ(sum[i], d.in[i] + d.branch[i]) << i;
  ExpectInvalid(cpu_.ResidualAdd(F32(sum, {N, C}), F32(d.in, {N, C}), F32(d.branch, {C})),
                "ResidualAdd");
}

TEST_F(BackendOpsTest, ResidualLayerNormForwardMatchesReference) {
  for (int C : {37, 768}) {
    LnData d(9, C, 11);
    const int N = d.N;
    // Row 0 has variance ~1e-6, where eps = 1e-5 dominates, and row 1 is all
    // zeros (rstd = 1/sqrt(eps), y = beta): both pin down eps.
    for (int c = 0; c < C; ++c) {
      d.in[c] = 0.001f * d.in[c];
      d.branch[c] = 0.0f;
      d.in[C + c] = d.branch[C + c] = 0.0f;
    }
    Floats res(N * C), y(N * C), mean(N), rstd(N);
    // A [B,T,C] view: row-wise ops only look at the last dimension.
    ASSERT_TRUE(cpu_.ResidualLayerNormForward(F32(res, {3, 3, C}), F32(y, {3, 3, C}),
                                              F32(mean, {3, 3}), F32(rstd, {3, 3}),
                                              F32(d.in, {3, 3, C}), F32(d.branch, {3, 3, C}),
                                              F32(d.gamma, {C}), F32(d.beta, {C}))
                    .ok());
    const Vec br = D(d.branch);
    auto want = ref::ResidualLayerNorm(D(d.in), &br, D(d.gamma), D(d.beta), N, C);
    EXPECT_TRUE(AllClose(res, want.residual_out, kFwdRtol, kFwdAtol)) << "C=" << C;
    EXPECT_TRUE(AllClose(y, want.y, kFwdRtol, kFwdAtol)) << "C=" << C;
    EXPECT_TRUE(AllClose(mean, want.mean, kFwdRtol, kFwdAtol)) << "C=" << C;
    EXPECT_TRUE(AllClose(rstd, want.rstd, kFwdRtol, kFwdAtol)) << "C=" << C;
  }
}

TEST_F(BackendOpsTest, LayerNormWithEmptyBranchReadsResidualIn) {
  LnData d(5, 20, 21);
  const int N = d.N, C = d.C;
  Floats y(N * C), mean(N), rstd(N);
  ASSERT_TRUE(cpu_.ResidualLayerNormForward(Tensor(), F32(y, {N, C}), F32(mean, {N}),
                                            F32(rstd, {N}), F32(d.in, {N, C}), Tensor(),
                                            F32(d.gamma, {C}), F32(d.beta, {C}))
                  .ok());
  auto want = ref::ResidualLayerNorm(D(d.in), nullptr, D(d.gamma), D(d.beta), N, C);
  EXPECT_TRUE(AllClose(y, want.y, kFwdRtol, kFwdAtol));
  EXPECT_TRUE(AllClose(rstd, want.rstd, kFwdRtol, kFwdAtol));
  // No branch means no residual_out either.
  Floats res(N * C);
  ExpectInvalid(cpu_.ResidualLayerNormForward(F32(res, {N, C}), F32(y, {N, C}), F32(mean, {N}),
                                              F32(rstd, {N}), F32(d.in, {N, C}), Tensor(),
                                              F32(d.gamma, {C}), F32(d.beta, {C})),
                "ResidualLayerNormForward");
}

TEST_F(BackendOpsTest, ResidualLayerNormGradientsMatchFiniteDifferences) {
  LnData d(4, 19, 31);
  const int N = d.N, C = d.C;
  Floats res(N * C), y(N * C), mean(N), rstd(N);
  ASSERT_TRUE(cpu_.ResidualLayerNormForward(
                      F32(res, {N, C}), F32(y, {N, C}), F32(mean, {N}), F32(rstd, {N}),
                      F32(d.in, {N, C}), F32(d.branch, {N, C}), F32(d.gamma, {C}), F32(d.beta, {C}))
                  .ok());
  Floats w = Uniform(N * C, 32);
  Floats dres(N * C, 0.0f), dgamma(C, 0.0f), dbeta(C, 0.0f);
  ASSERT_TRUE(cpu_.ResidualLayerNormBackward(F32(dres, {N, C}), F32(dgamma, {C}), F32(dbeta, {C}),
                                             F32(w, {N, C}), F32(res, {N, C}), F32(d.gamma, {C}),
                                             F32(mean, {N}), F32(rstd, {N}))
                  .ok());
  const Vec in = D(d.in), br = D(d.branch), ga = D(d.gamma), be = D(d.beta), wd = D(w);
  auto loss = [&](const Vec& i, const Vec& b, const Vec& g, const Vec& e) {
    return ref::Dot(ref::ResidualLayerNorm(i, &b, g, e, N, C).y, wd);
  };
  // residual_out = in + branch, so both inputs get the same gradient, d_residual.
  EXPECT_TRUE(AllClose(dres, NumericGrad(in, [&](const Vec& x) { return loss(x, br, ga, be); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dres, NumericGrad(br, [&](const Vec& x) { return loss(in, x, ga, be); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dgamma, NumericGrad(ga, [&](const Vec& x) { return loss(in, br, x, be); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dbeta, NumericGrad(be, [&](const Vec& x) { return loss(in, br, ga, x); }),
                       kGradRtol, kGradAtol));
}

TEST_F(BackendOpsTest, LayerNormBackwardAccumulatesAndIsDeterministic) {
  LnData d(200, 48, 41);  // 200 rows: several row chunks, the last one partial
  const int N = d.N, C = d.C;
  Floats y(N * C), mean(N), rstd(N);
  ASSERT_TRUE(cpu_.ResidualLayerNormForward(Tensor(), F32(y, {N, C}), F32(mean, {N}),
                                            F32(rstd, {N}), F32(d.in, {N, C}), Tensor(),
                                            F32(d.gamma, {C}), F32(d.beta, {C}))
                  .ok());
  Floats dy = Uniform(N * C, 42);
  const Floats pre_res = Uniform(N * C, 43), pre_g = Uniform(C, 44), pre_b = Uniform(C, 45);
  auto run = [&](const Floats& r0, const Floats& g0, const Floats& b0) {
    Floats dres = r0, dg = g0, db = b0;
    EXPECT_TRUE(cpu_.ResidualLayerNormBackward(F32(dres, {N, C}), F32(dg, {C}), F32(db, {C}),
                                               F32(dy, {N, C}), F32(d.in, {N, C}),
                                               F32(d.gamma, {C}), F32(mean, {N}), F32(rstd, {N}))
                    .ok());
    return Concat(Concat(dres, dg), db);
  };
  const Floats fresh = run(Floats(N * C, 0.0f), Floats(C, 0.0f), Floats(C, 0.0f));
  const Floats acc = run(pre_res, pre_g, pre_b);
  const Floats pre = Concat(Concat(pre_res, pre_g), pre_b);
  Vec want(pre.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = double{pre[i]} + fresh[i];
  // dgamma/dbeta are sums over 200 rows: allow their float rounding.
  EXPECT_TRUE(AllClose(acc, want, kAccRtol, 1e-5));
  ExpectSameForThreadCounts([&] { return run(pre_res, pre_g, pre_b); });
}

TEST_F(BackendOpsTest, LayerNormRejectsBadShapes) {
  const int N = 3, C = 8;
  Floats in(N * C), br(N * C), res(N * C), y(N * C), mean(N), rstd(N), g(C), b(C), g2(C + 1);
  ExpectInvalid(cpu_.ResidualLayerNormForward(F32(res, {N, C}), F32(y, {N, C}), F32(mean, {N}),
                                              F32(rstd, {N}), F32(in, {N, C}), F32(br, {N, C}),
                                              F32(g2, {C + 1}), F32(b, {C})),
                "gamma");
  ExpectInvalid(cpu_.ResidualLayerNormForward(F32(res, {N, C}), F32(y, {N, C}), F32(mean, {N - 1}),
                                              F32(rstd, {N}), F32(in, {N, C}), F32(br, {N, C}),
                                              F32(g, {C}), F32(b, {C})),
                "mean");
  ExpectInvalid(
      cpu_.ResidualLayerNormBackward(F32(res, {N, C}), F32(g, {C}), F32(b, {C}), F32(y, {C, N}),
                                     F32(in, {N, C}), F32(g, {C}), F32(mean, {N}), F32(rstd, {N})),
      "ResidualLayerNormBackward");
}

// ---- matmul --------------------------------------------------------------------

TEST_F(BackendOpsTest, MatmulForwardMatchesReference) {
  const int N = 33, C = 70, OC = 45;
  Floats inp = Uniform(N * C, 51), w = Uniform(OC * C, 52), b = Uniform(OC, 53), out(N * OC);
  ASSERT_TRUE(
      cpu_.MatmulForward(F32(out, {N, OC}), F32(inp, {N, C}), F32(w, {OC, C}), F32(b, {OC})).ok());
  const Vec bd = D(b);
  EXPECT_TRUE(AllClose(out, ref::Matmul(D(inp), D(w), &bd, N, C, OC), kFwdRtol, kFwdAtol));
  ASSERT_TRUE(
      cpu_.MatmulForward(F32(out, {N, OC}), F32(inp, {N, C}), F32(w, {OC, C}), Tensor()).ok());
  EXPECT_TRUE(AllClose(out, ref::Matmul(D(inp), D(w), nullptr, N, C, OC), kFwdRtol, kFwdAtol));
}

TEST_F(BackendOpsTest, MatmulGradientsMatchFiniteDifferences) {
  const int N = 3, C = 5, OC = 4;
  Floats inp = Uniform(N * C, 61), w = Uniform(OC * C, 62), b = Uniform(OC, 63);
  Floats dout = Uniform(N * OC, 64);
  Floats dinp(N * C, 7.0f), dw(OC * C, 0.0f), db(OC, 0.0f);  // dinp is overwritten
  ASSERT_TRUE(cpu_.MatmulBackward(F32(dinp, {N, C}), F32(dw, {OC, C}), F32(db, {OC}),
                                  F32(dout, {N, OC}), F32(inp, {N, C}), F32(w, {OC, C}))
                  .ok());
  const Vec id = D(inp), wd = D(w), bd = D(b), g = D(dout);
  auto loss = [&](const Vec& i, const Vec& ww, const Vec& bb) {
    return ref::Dot(ref::Matmul(i, ww, &bb, N, C, OC), g);
  };
  EXPECT_TRUE(AllClose(dinp, NumericGrad(id, [&](const Vec& x) { return loss(x, wd, bd); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dw, NumericGrad(wd, [&](const Vec& x) { return loss(id, x, bd); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(db, NumericGrad(bd, [&](const Vec& x) { return loss(id, wd, x); }),
                       kGradRtol, kGradAtol));
}

TEST_F(BackendOpsTest, MatmulBackwardAccumulatesSkipsAndIsDeterministic) {
  const int N = 40, C = 24, OC = 36;
  Floats inp = Uniform(N * C, 71), w = Uniform(OC * C, 72), dout = Uniform(N * OC, 73);
  const Floats pre_w = Uniform(OC * C, 74), pre_b = Uniform(OC, 75);
  auto run = [&](const Floats& w0, const Floats& b0, bool with_dinp) {
    Floats dinp(N * C, 0.0f), dw = w0, db = b0;
    EXPECT_TRUE(cpu_.MatmulBackward(with_dinp ? F32(dinp, {N, C}) : Tensor(), F32(dw, {OC, C}),
                                    F32(db, {OC}), F32(dout, {N, OC}), F32(inp, {N, C}),
                                    F32(w, {OC, C}))
                    .ok());
    return Concat(Concat(dinp, dw), db);
  };
  const Floats fresh = run(Floats(OC * C, 0.0f), Floats(OC, 0.0f), true);
  const Floats acc = run(pre_w, pre_b, true);
  // The double-precision gradients themselves, at this larger size.
  const Vec g = D(dout), id = D(inp), wd = D(w);
  Vec want(fresh.size(), 0.0);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      for (int c = 0; c < C; ++c) {
        want[n * C + c] += g[n * OC + o] * wd[o * C + c];
        want[N * C + o * C + c] += g[n * OC + o] * id[n * C + c];
      }
      want[N * C + OC * C + o] += g[n * OC + o];
    }
  }
  EXPECT_TRUE(AllClose(fresh, want, kFwdRtol, kFwdAtol));
  const Floats pre = Concat(Concat(Floats(N * C, 0.0f), pre_w), pre_b);
  for (size_t i = 0; i < want.size(); ++i) want[i] = double{pre[i]} + fresh[i];
  EXPECT_TRUE(AllClose(acc, want, kAccRtol, kAccAtol));
  // Empty dinp: skipped, and dweight/dbias come out the same.
  const Floats skipped = run(pre_w, pre_b, false);
  EXPECT_TRUE(BitwiseEqual(Floats(skipped.begin() + N * C, skipped.end()),
                           Floats(acc.begin() + N * C, acc.end())));
  // The bias column sums are ours (the GEMMs are OpenBLAS's): check them bitwise.
  ExpectSameForThreadCounts([&] {
    Floats r = run(pre_w, pre_b, false);
    return Floats(r.end() - OC, r.end());
  });
}

TEST_F(BackendOpsTest, MatmulRejectsBadShapes) {
  const int N = 4, C = 6, OC = 5;
  Floats inp(N * C), w(OC * C + OC), b(OC + 1), out(N * OC), dout(N * OC), dinp(N * C);
  ExpectInvalid(
      cpu_.MatmulForward(F32(out, {N, OC}), F32(inp, {N, C}), F32(w, {OC, C + 1}), Tensor()),
      "weight");
  ExpectInvalid(
      cpu_.MatmulForward(F32(out, {N, OC}), F32(inp, {N, C}), F32(w, {OC, C}), F32(b, {OC + 1})),
      "bias");
  ExpectInvalid(
      cpu_.MatmulForward(F32(out, {N, OC - 1}), F32(inp, {N, C}), F32(w, {OC, C}), Tensor()),
      "MatmulForward");
  ExpectInvalid(cpu_.MatmulBackward(F32(dinp, {N, C}), F32(w, {OC, C}), Tensor(),
                                    F32(dout, {N, OC}), F32(inp, {N - 1, C}), F32(w, {OC, C})),
                "inp");
  ExpectInvalid(cpu_.MatmulBackward(F32(dinp, {N, C}), Tensor(), Tensor(), F32(dout, {N, OC}),
                                    F32(inp, {N, C}), F32(w, {OC, C})),
                "dweight");
}

// ---- GELU ------------------------------------------------------------------------

TEST_F(BackendOpsTest, GeluForwardMatchesReference) {
  Floats x = Uniform(1000, 81, -6.0f, 6.0f);
  for (float v : {0.0f, -0.0f, 1e-6f, -1e-6f, 10.0f, -10.0f, -20.0f, 30.0f}) x.push_back(v);
  Floats out(x.size());
  const int64_t n = static_cast<int64_t>(x.size());
  ASSERT_TRUE(cpu_.GeluForward(F32(out, {n}), F32(x, {n})).ok());
  EXPECT_TRUE(AllClose(out, ref::Gelu(D(x)), kFwdRtol, kFwdAtol));
}

TEST_F(BackendOpsTest, GeluGradientMatchesFiniteDifferences) {
  const int N = 6, C = 9;
  Floats x = Uniform(N * C, 91, -4.0f, 4.0f), w = Uniform(N * C, 92), dinp(N * C);
  ASSERT_TRUE(cpu_.GeluBackward(F32(dinp, {N, C}), F32(w, {N, C}), F32(x, {N, C})).ok());
  const Vec wd = D(w);
  EXPECT_TRUE(AllClose(dinp,
                       NumericGrad(D(x), [&](const Vec& v) { return ref::Dot(ref::Gelu(v), wd); }),
                       kGradRtol, kGradAtol));
  // dinp may alias dout.
  Floats inplace = w;
  ASSERT_TRUE(cpu_.GeluBackward(F32(inplace, {N, C}), F32(inplace, {N, C}), F32(x, {N, C})).ok());
  EXPECT_TRUE(BitwiseEqual(inplace, dinp));
}

TEST_F(BackendOpsTest, GeluIsDeterministicAcrossThreadCounts) {
  const int64_t n = 100003;  // above the parallel threshold, odd chunk boundaries
  Floats x = Uniform(n, 93, -5.0f, 5.0f), dout = Uniform(n, 94);
  ExpectSameForThreadCounts([&] {
    Floats out(n), dinp(n);
    EXPECT_TRUE(cpu_.GeluForward(F32(out, {n}), F32(x, {n})).ok());
    EXPECT_TRUE(cpu_.GeluBackward(F32(dinp, {n}), F32(dout, {n}), F32(x, {n})).ok());
    return Concat(out, dinp);
  });
}

TEST_F(BackendOpsTest, GeluRejectsBadShapes) {
  Floats a(12), b(12), c(12);
  ExpectInvalid(cpu_.GeluForward(F32(a, {3, 4}), F32(b, {4, 3})), "GeluForward");
  ExpectInvalid(cpu_.GeluBackward(F32(a, {12}), F32(b, {2, 6}), F32(c, {12})), "dout");
}

// ---- cross-entropy ---------------------------------------------------------------

// The forward's statistics and losses for one row block.
struct CeForwardOut {
  Floats row_max, sum_exp, target_logit, loss, lse;
};

// The three forward steps on a single shard holding the whole vocabulary
// (vocab_start 0, no reductions between the steps: one process).
CeForwardOut CeForward(CpuBackend& cpu, Floats& logits, Ints& tg, int N, int Vp, int V) {
  CeForwardOut o{Floats(N), Floats(N), Floats(N), Floats(N), Floats(N)};
  EXPECT_TRUE(cpu.CrossEntropyRowMax(F32(o.row_max, {N}), F32(logits, {N, Vp}), 0, V).ok());
  EXPECT_TRUE(cpu.CrossEntropyPartials(F32(o.sum_exp, {N}), F32(o.target_logit, {N}),
                                       F32(logits, {N, Vp}), I32(tg, {N}), F32(o.row_max, {N}), 0,
                                       V)
                  .ok());
  EXPECT_TRUE(cpu.CrossEntropyLoss(F32(o.loss, {N}), F32(o.lse, {N}), F32(o.row_max, {N}),
                                   F32(o.sum_exp, {N}), F32(o.target_logit, {N}))
                  .ok());
  return o;
}

// Columns [begin, begin + width) of a row-major [N, cols] matrix.
Floats Columns(const Floats& x, int N, int cols, int begin, int width) {
  Floats r(static_cast<size_t>(N) * width);
  for (int n = 0; n < N; ++n) {
    std::copy(x.begin() + n * cols + begin, x.begin() + n * cols + begin + width,
              r.begin() + n * width);
  }
  return r;
}

TEST_F(BackendOpsTest, CrossEntropyForwardMatchesReferenceAndIgnoresPadding) {
  const int N = 7, Vp = 160, V = 150;
  Floats logits = Uniform(N * Vp, 101, -4.0f, 4.0f);
  for (int n = 0; n < N; ++n) {
    for (int i = V; i < Vp; ++i) logits[n * Vp + i] = 1e4f;  // padding: must not count
  }
  for (int i = 0; i < V; ++i) logits[3 * Vp + i] += 1000.0f;  // large logits: stable
  Ints tg = RandomInts(N, 102, V);
  CeForwardOut o = CeForward(cpu_, logits, tg, N, Vp, V);
  EXPECT_TRUE(AllClose(o.loss, ref::CrossEntropy(D(logits), tg, N, Vp, V), kFwdRtol, kFwdAtol));
  EXPECT_TRUE(AllClose(o.lse, ref::LogSumExp(D(logits), N, Vp, V), kFwdRtol, kFwdAtol));
  for (int n = 0; n < N; ++n) {
    EXPECT_EQ(o.target_logit[n], logits[n * Vp + tg[n]]) << n;
    EXPECT_EQ(o.row_max[n], *std::max_element(logits.begin() + n * Vp, logits.begin() + n * Vp + V))
        << n;
  }
}

TEST_F(BackendOpsTest, CrossEntropyGradientMatchesFiniteDifferences) {
  const int N = 3, Vp = 12, V = 10;
  const float dloss = 0.37f;
  Floats logits = Uniform(N * Vp, 111, -3.0f, 3.0f);
  Ints tg = {4, 0, 9};
  CeForwardOut o = CeForward(cpu_, logits, tg, N, Vp, V);
  Floats dlogits(N * Vp, 5.0f);  // padded columns must come back 0
  ASSERT_TRUE(cpu_.CrossEntropyBackward(F32(dlogits, {N, Vp}), F32(logits, {N, Vp}), I32(tg, {N}),
                                        F32(o.lse, {N}), 0, V, dloss)
                  .ok());
  auto num = NumericGrad(D(logits), [&](const Vec& x) {
    double s = 0;
    for (double l : ref::CrossEntropy(x, tg, N, Vp, V)) s += l;
    return double{dloss} * s;
  });
  EXPECT_TRUE(AllClose(dlogits, num, kGradRtol, kGradAtol));
  for (int n = 0; n < N; ++n) {
    for (int i = V; i < Vp; ++i) EXPECT_EQ(dlogits[n * Vp + i], 0.0f) << n << "," << i;
  }
}

TEST_F(BackendOpsTest, CrossEntropyBackwardInPlace) {
  const int N = 9, Vp = 256, V = 250;
  Floats logits = Uniform(N * Vp, 121, -5.0f, 5.0f);
  for (int n = 0; n < N; ++n) logits[n * Vp + V + 1] = 1e4f;  // padding garbage
  Ints tg = RandomInts(N, 122, V);
  CeForwardOut o = CeForward(cpu_, logits, tg, N, Vp, V);
  Floats separate(N * Vp);
  ASSERT_TRUE(cpu_.CrossEntropyBackward(F32(separate, {N, Vp}), F32(logits, {N, Vp}), I32(tg, {N}),
                                        F32(o.lse, {N}), 0, V, 0.5f)
                  .ok());
  Floats inplace = logits;
  ASSERT_TRUE(cpu_.CrossEntropyBackward(F32(inplace, {N, Vp}), F32(inplace, {N, Vp}), I32(tg, {N}),
                                        F32(o.lse, {N}), 0, V, 0.5f)
                  .ok());
  EXPECT_TRUE(BitwiseEqual(inplace, separate));
  for (int n = 0; n < N; ++n) {
    double row = 0;  // softmax - onehot sums to 0 over the real vocabulary
    for (int i = 0; i < V; ++i) row += inplace[n * Vp + i];
    EXPECT_NEAR(row, 0.0, 1e-6);
    for (int i = V; i < Vp; ++i) EXPECT_EQ(inplace[n * Vp + i], 0.0f);
  }
}

TEST_F(BackendOpsTest, CrossEntropyIsDeterministicAcrossThreadCounts) {
  const int N = 80, Vp = 384, V = 250;  // N * V above the parallel threshold
  Floats logits = Uniform(N * Vp, 123, -5.0f, 5.0f);
  Ints tg = RandomInts(N, 124, V);
  ExpectSameForThreadCounts([&] {
    CeForwardOut o = CeForward(cpu_, logits, tg, N, Vp, V);
    Floats d(N * Vp);
    EXPECT_TRUE(cpu_.CrossEntropyBackward(F32(d, {N, Vp}), F32(logits, {N, Vp}), I32(tg, {N}),
                                          F32(o.lse, {N}), 0, V, 1.0f)
                    .ok());
    return Concat(Concat(Concat(o.row_max, o.sum_exp), Concat(o.loss, o.lse)), d);
  });
}

// Tensor parallelism's vocabulary-parallel cross-entropy, with plain loops in
// place of the all-reduces: the [N, Vp] logits split into T = 2 and 4 column
// shards (vocab_start = k Vp / T). With Vp = 384 and V = 250, the last shard
// of 2 is partly padding and the last of 4 is padding only. The shard maxes
// combine with max (exact), the partial sums and target logits with sums; the
// losses then equal the unsplit ones up to the summation order of sum_exp
// (rtol 1e-5, atol 1e-6, as forward vs reference), and each shard's dlogits
// equals its columns of the unsplit dlogits (same tolerance: the lse differ by
// a rounding or two).
TEST_F(BackendOpsTest, CrossEntropyShardsMatchTheUnsplitComputation) {
  const int N = 16, Vp = 384, V = 250;
  const float dloss = 0.25f;
  Floats logits = Uniform(N * Vp, 131, -5.0f, 5.0f);
  for (int n = 0; n < N; ++n) {
    for (int i = V; i < Vp; ++i) logits[n * Vp + i] = 1e4f;  // padding garbage
  }
  for (int i = 200; i < V; ++i) logits[3 * Vp + i] += 1000.0f;  // one shard holds the max
  Ints tg = RandomInts(N, 132, V);
  const int edges[] = {0, 95, 96, 191, 192, V - 1};  // targets at the shard boundaries
  for (int i = 0; i < 6; ++i) tg[i] = edges[i];
  CeForwardOut whole = CeForward(cpu_, logits, tg, N, Vp, V);
  Floats dwhole(N * Vp);
  ASSERT_TRUE(cpu_.CrossEntropyBackward(F32(dwhole, {N, Vp}), F32(logits, {N, Vp}), I32(tg, {N}),
                                        F32(whole.lse, {N}), 0, V, dloss)
                  .ok());
  for (int shards : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << shards << " shards");
    const int Vs = Vp / shards;
    std::vector<Floats> part(shards);
    for (int k = 0; k < shards; ++k) part[k] = Columns(logits, N, Vp, k * Vs, Vs);
    // Step 1: shard maxes, all-reduce MAX.
    Floats row_max(N, -std::numeric_limits<float>::infinity());
    for (int k = 0; k < shards; ++k) {
      Floats m(N);
      ASSERT_TRUE(cpu_.CrossEntropyRowMax(F32(m, {N}), F32(part[k], {N, Vs}), k * Vs, V).ok());
      for (int n = 0; n < N; ++n) {
        if (k * Vs >= V) {  // padding only
          EXPECT_EQ(m[n], -std::numeric_limits<float>::max());
        }
        row_max[n] = std::max(row_max[n], m[n]);
      }
    }
    EXPECT_TRUE(BitwiseEqual(row_max, whole.row_max));
    // Step 2: partial sums and target logits against the global max, all-reduce SUM.
    Floats sum_exp(N, 0.0f), target_logit(N, 0.0f);
    for (int k = 0; k < shards; ++k) {
      Floats s(N), t(N);
      ASSERT_TRUE(cpu_.CrossEntropyPartials(F32(s, {N}), F32(t, {N}), F32(part[k], {N, Vs}),
                                            I32(tg, {N}), F32(row_max, {N}), k * Vs, V)
                      .ok());
      for (int n = 0; n < N; ++n) {
        const bool holds = tg[n] >= k * Vs && tg[n] < (k + 1) * Vs;
        EXPECT_EQ(t[n], holds ? logits[n * Vp + tg[n]] : 0.0f) << "shard " << k << " row " << n;
        if (k * Vs >= V) {
          EXPECT_EQ(s[n], 0.0f);
        }
        sum_exp[n] += s[n];
        target_logit[n] += t[n];
      }
    }
    EXPECT_TRUE(BitwiseEqual(target_logit, whole.target_logit));
    // Step 3: the losses from the reduced statistics.
    Floats loss(N), lse(N);
    ASSERT_TRUE(cpu_.CrossEntropyLoss(F32(loss, {N}), F32(lse, {N}), F32(row_max, {N}),
                                      F32(sum_exp, {N}), F32(target_logit, {N}))
                    .ok());
    EXPECT_TRUE(AllClose(loss, D(whole.loss), kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(lse, D(whole.lse), kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(loss, ref::CrossEntropy(D(logits), tg, N, Vp, V), kFwdRtol, kFwdAtol));
    // Backward: each shard its own columns, in place, from the reduced lse.
    for (int k = 0; k < shards; ++k) {
      Floats d = part[k];
      ASSERT_TRUE(cpu_.CrossEntropyBackward(F32(d, {N, Vs}), F32(d, {N, Vs}), I32(tg, {N}),
                                            F32(lse, {N}), k * Vs, V, dloss)
                      .ok());
      EXPECT_TRUE(AllClose(d, D(Columns(dwhole, N, Vp, k * Vs, Vs)), kFwdRtol, kFwdAtol))
          << "shard " << k;
      if (k * Vs >= V) {
        EXPECT_TRUE(BitwiseEqual(d, Floats(N * Vs, 0.0f))) << "shard " << k;
      }
    }
  }
}

TEST_F(BackendOpsTest, CrossEntropyRejectsBadInput) {
  const int N = 2, Vp = 8;
  Floats logits(N * Vp), loss(N), lse(N), mx(N), se(N, 1.0f), tl(N);
  Ints tg = {1, 7};
  EXPECT_TRUE(cpu_.CrossEntropyRowMax(F32(mx, {N}), F32(logits, {N, Vp}), 0, 8).ok());
  ExpectInvalid(cpu_.CrossEntropyRowMax(F32(mx, {N + 1}), F32(logits, {N, Vp}), 0, 8), "row_max");
  ExpectInvalid(cpu_.CrossEntropyRowMax(F32(mx, {N}), F32(logits, {N, Vp}), -8, 8), "vocab_start");
  ExpectInvalid(cpu_.CrossEntropyRowMax(F32(mx, {N}), F32(logits, {N, Vp}), 0, 0), "vocab_size");
  EXPECT_TRUE(cpu_.CrossEntropyPartials(F32(se, {N}), F32(tl, {N}), F32(logits, {N, Vp}),
                                        I32(tg, {N}), F32(mx, {N}), 0, 8)
                  .ok());
  ExpectInvalid(cpu_.CrossEntropyPartials(F32(se, {N}), F32(tl, {N}), F32(logits, {N, Vp}),
                                          I32(tg, {N}), F32(mx, {N}), 0, 7),
                "targets");  // 7 >= V
  ExpectInvalid(cpu_.CrossEntropyPartials(F32(se, {N}), F32(tl, {1}), F32(logits, {N, Vp}),
                                          I32(tg, {N}), F32(mx, {N}), 0, 8),
                "target_logit");
  EXPECT_TRUE(
      cpu_.CrossEntropyLoss(F32(loss, {N}), F32(lse, {N}), F32(mx, {N}), F32(se, {N}), F32(tl, {N}))
          .ok());
  ExpectInvalid(cpu_.CrossEntropyLoss(F32(loss, {N}), F32(lse, {N}), F32(mx, {N}), F32(se, {1}),
                                      F32(tl, {N})),
                "sum_exp");
  ExpectInvalid(
      cpu_.CrossEntropyLoss(Tensor(), F32(lse, {N}), F32(mx, {N}), F32(se, {N}), F32(tl, {N})),
      "losses");
  ExpectInvalid(cpu_.CrossEntropyBackward(F32(loss, {N}), F32(logits, {N, Vp}), I32(tg, {N}),
                                          F32(lse, {N}), 0, 8, 1.0f),
                "dlogits");
  ExpectInvalid(cpu_.CrossEntropyBackward(F32(logits, {N, Vp}), F32(logits, {N, Vp}), I32(tg, {N}),
                                          F32(lse, {1}), 0, 8, 1.0f),
                "lse");
}

// ---- optimizer ---------------------------------------------------------------------

TEST_F(BackendOpsTest, SumOfSquaresIsExactEnoughAndDeterministic) {
  const int64_t n = 3 * (1 << 14) + 123;  // several chunks, the last one partial
  Floats x = Uniform(n, 131, -3.0f, 3.0f);
  // The result lands in one slot of a vector of sums, the others untouched.
  Floats sums = {-1.0f, -1.0f, -1.0f};
  ASSERT_TRUE(cpu_.SumOfSquares(F32(x, {n}), F32(sums, {3}).Slice(1, {1})).ok());
  const double want = ref::SumOfSquares(x);
  // Accumulated in double, rounded once: within half a float ulp.
  EXPECT_NEAR(sums[1], want, 0.6 * std::ldexp(want, -23));
  EXPECT_EQ(sums[0], -1.0f);
  EXPECT_EQ(sums[2], -1.0f);
  const int saved = omp_get_max_threads();
  for (int nt : {1, 2, 3}) {
    omp_set_num_threads(nt);
    Floats again = {0.0f};
    ASSERT_TRUE(cpu_.SumOfSquares(F32(x, {n}), F32(again, {1})).ok());
    EXPECT_EQ(std::memcmp(&again[0], &sums[1], sizeof(float)), 0) << nt << " threads";
  }
  omp_set_num_threads(saved);
  ExpectInvalid(cpu_.SumOfSquares(F32(x, {n}), F32(sums, {2})), "SumOfSquares");
  ExpectInvalid(cpu_.SumOfSquares(F32(x, {n}), Tensor()), "SumOfSquares");
}

TEST_F(BackendOpsTest, AdamWMatchesHandComputedStep) {
  // One element, worked by hand: grad_scale 0.5, step 3, weight decay 0.1.
  //   g = 0.2 * 0.5 = 0.1
  //   m = 0.9 * 0.05 + 0.1 * 0.1 = 0.055        v = 0.999 * 0.004 + 0.001 * 0.01 = 0.004006
  //   mhat = 0.055 / (1 - 0.9^3) = 0.055 / 0.271 = 0.2029520295...
  //   vhat = 0.004006 / (1 - 0.999^3) = 0.004006 / 0.002997001 = 1.3366696...
  //   param = 0.5 - 0.01 * (mhat / (sqrt(vhat) + 1e-8) + 0.1 * 0.5)
  //         = 0.5 - 0.01 * (0.175544... + 0.05) = 0.49774455...
  Floats param = {0.5f}, grad = {0.2f}, m = {0.05f}, v = {0.004f};
  AdamWParams p;
  p.lr = 0.01f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-8f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  p.step = 3;
  ASSERT_TRUE(cpu_.AdamWUpdate(F32(param, {1}), F32(grad, {1}), F32(m, {1}), F32(v, {1}), p).ok());
  const double mhat = 0.055 / 0.271, vhat = 0.004006 / 0.002997001;
  const double want = 0.5 - 0.01 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.05);
  EXPECT_NEAR(m[0], 0.055, 1e-7);
  EXPECT_NEAR(v[0], 0.004006, 1e-9);
  EXPECT_NEAR(param[0], want, 1e-7);
  EXPECT_NEAR(param[0], 0.4977445, 1e-6);
}

TEST_F(BackendOpsTest, AdamWMatchesReferenceOverSteps) {
  const int n = 40000;  // above the parallel threshold
  Floats param = Uniform(n, 141), m(n, 0.0f), v(n, 0.0f);
  std::vector<ref::AdamWElem> want(n);
  for (int i = 0; i < n; ++i) want[i] = {param[i], 0.0, 0.0};
  AdamWParams p;
  p.lr = 3e-3f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.8f;
  for (int step = 1; step <= 3; ++step) {
    p.step = step;
    Floats grad = Uniform(n, 150 + step);
    ASSERT_TRUE(cpu_.AdamWUpdate(F32(param, {200, 200}), F32(grad, {200, 200}), F32(m, {200, 200}),
                                 F32(v, {200, 200}), p)
                    .ok());
    for (int i = 0; i < n; ++i) {
      want[i] = ref::AdamW(want[i], grad[i], p.lr, p.beta1, p.beta2, p.eps, p.weight_decay,
                           p.grad_scale, step);
    }
  }
  Vec wp(n), wm(n), wv(n);
  for (int i = 0; i < n; ++i) {
    wp[i] = want[i].param;
    wm[i] = want[i].m;
    wv[i] = want[i].v;
  }
  EXPECT_TRUE(AllClose(param, wp, kFwdRtol, kFwdAtol));
  EXPECT_TRUE(AllClose(m, wm, kFwdRtol, kFwdAtol));
  EXPECT_TRUE(AllClose(v, wv, kFwdRtol, kFwdAtol));
}

TEST_F(BackendOpsTest, AdamWRejectsBadInput) {
  Floats a(6), b(6), c(6), d(5);
  AdamWParams p;
  ExpectInvalid(cpu_.AdamWUpdate(F32(a, {6}), F32(b, {6}), F32(c, {6}), F32(d, {5}), p), "v");
  p.step = 0;
  ExpectInvalid(cpu_.AdamWUpdate(F32(a, {6}), F32(b, {6}), F32(c, {6}), F32(c, {6}), p), "step");
}

TEST_F(BackendOpsTest, FillWritesEveryElement) {
  for (int64_t n : {int64_t{7}, int64_t{70001}}) {
    Floats x(n + 1, -1.0f);
    ASSERT_TRUE(cpu_.Fill(F32(x, {n}), 2.5f).ok());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 2.5f) << i;
    EXPECT_EQ(x[n], -1.0f);  // and not one past the end
  }
  Ints i(4);
  ExpectInvalid(cpu_.Fill(I32(i, {4}), 1.0f), "Fill");
}

}  // namespace
}  // namespace ladder
