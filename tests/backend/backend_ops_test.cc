// Tests of the backend ops (everything but attention, paged attention and
// int8, which have their own files) against the double-precision references
// in reference_ops.h. Every TEST_P runs on each backend of
// backend_test_util.h (cpu, cuda_sim, and cuda where a GPU is usable): the
// inputs are uploaded, the op runs on the backend's device, the result is
// read back and compared on the host. Outputs start as NaN, so an element an
// op does not write fails the comparison.
//
// Tolerances (|got - want| <= rtol * |want| + atol * max|want|, per element),
// the same on every backend:
//  - forward vs double reference:        rtol 1e-5, atol 1e-6. The CUDA
//    kernels sum in other orders (tree reductions, cuBLASLt tiles) and use
//    the device expf/tanhf; with sums of at most a few hundred unit-size
//    terms their rounding stays far below this, as it does for the CPU.
//  - analytical backward vs central differences of the double reference
//    (eps 1e-6, loss L = sum(out * w) for random w):  rtol 1e-4, atol 1e-5
//  - accumulation (+=) vs prefill + fresh gradient:    rtol 1e-6, atol 1e-6
//    (1e-5 absolute for LayerNorm's dgamma/dbeta, sums over 200 rows)
//  - vocabulary shards (T = 2, 4) vs the unsplit op: cross-entropy losses,
//    lse and dlogits rtol 1e-5, atol 1e-6 (only sum_exp's summation order
//    differs); row max, target logit and all embedding results bitwise, on
//    every backend: each is a max, a copy or the same sum with exact zeros
//    added.
//  - SumOfSquares: within 0.6 float ulp of the exact sum (double
//    accumulation, one rounding) on every backend.
// Determinism claims are checked bitwise: every backend gives the same bits
// for the same call twice; the CPU backend, in addition, for 1, 2 and 3
// OpenMP threads (CpuOnlyOpsTest.*ThreadCounts).
//
// CPU-only (CpuOnlyOpsTest): the thread-count independence, the CPU's
// vectorized ExpF, and the InvalidArgument for ids that live on the device
// (a negative token, a position outside [0, maxT), a target outside [0, V)):
// the CUDA backend cannot see those without a copy back, and its kernels
// treat them as "contributes nothing" instead (src/backend/cuda/embedding.h,
// cross_entropy.h). Shape errors are checked on every backend.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_common.h"
#include "tests/backend/backend_test_util.h"
#include "tests/backend/cpu_test_inputs.h"
#include "tests/backend/reference_ops.h"

namespace ladder {
namespace {

using ref::Vec;
using testing_backends::AllClose;
using testing_backends::BitwiseEqual;
using testing_backends::DeviceArray;
using testing_inputs::RandomInts;
using testing_inputs::Uniform;
using Floats = std::vector<float>;
using Ints = std::vector<int32_t>;

constexpr double kFwdRtol = 1e-5, kFwdAtol = 1e-6;
constexpr double kGradRtol = 1e-4, kGradAtol = 1e-5;
constexpr double kAccRtol = 1e-6, kAccAtol = 1e-6;
constexpr double kFdEps = 1e-6;

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
// it returns are bitwise identical (the CPU backend's promise).
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

// Runs `f` twice and checks the two results are bitwise identical (every
// backend's promise).
void ExpectDeterministic(const std::function<Floats()>& f) {
  const Floats first = f();
  EXPECT_TRUE(BitwiseEqual(f(), first)) << "second run";
}

void ExpectInvalid(const absl::Status& s, const std::string& what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(what), std::string::npos) << s;
}

Floats Concat(const Floats& a, const Floats& b) {
  Floats r = a;
  r.insert(r.end(), b.begin(), b.end());
  return r;
}

class BackendOpsTest : public testing_backends::BackendTest {};
LADDER_INSTANTIATE_ON_ALL_BACKENDS(BackendOpsTest);

class CpuOnlyOpsTest : public testing_backends::CpuBackendTest {};

// ---- ExpF (the CPU's vectorized exp behind GELU and cross-entropy) -----------

TEST(CpuOnlyExpF, MatchesExp) {
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

TEST_P(BackendOpsTest, EmbeddingForwardMatchesReference) {
  struct Shape {
    int B, T, C, Vp, maxT;
  };
  uint32_t seed = 1;
  for (Shape s : {Shape{3, 5, 37, 11, 7}, Shape{1, 1, 1, 3, 1}, Shape{2, 7, 131, 19, 9}}) {
    const int B = s.B, T = s.T, C = s.C, Vp = s.Vp, maxT = s.maxT;
    SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " C=" << C);
    const Ints tok = RandomInts(B * T, ++seed, Vp);
    const Ints pos = ref::SequencePositions(B, T);
    const Floats wte = Uniform(Vp * C, ++seed), wpe = Uniform(maxT * C, ++seed);
    auto dtok = Up(tok, {B, T}), dpos = Up(pos, {B, T});
    auto dwte = Up(wte, {Vp, C}), dwpe = Up(wpe, {maxT, C});
    auto out = Out({B, T, C});
    ASSERT_TRUE(be().EmbeddingForward(out.t(), dtok.t(), dpos.t(), dwte.t(), dwpe.t(), 0).ok());
    EXPECT_TRUE(
        AllClose(out.Get(), ref::Embedding(tok, pos, C, D(wte), D(wpe)), kFwdRtol, kFwdAtol));
    // No wpe: the token rows alone.
    out.Poison();
    ASSERT_TRUE(be().EmbeddingForward(out.t(), dtok.t(), dpos.t(), dwte.t(), Tensor(), 0).ok());
    EXPECT_TRUE(
        AllClose(out.Get(), ref::Embedding(tok, pos, C, D(wte), Vec()), kFwdRtol, kFwdAtol));
  }
}

TEST_P(BackendOpsTest, EmbeddingGradientsMatchFiniteDifferences) {
  const int B = 2, T = 3, C = 5, Vp = 4, maxT = 4;
  const Ints tok = {1, 3, 1, 1, 0, 3};  // repeated tokens: the scatter must add them all
  const Ints pos = ref::SequencePositions(B, T);
  const Floats wte = Uniform(Vp * C, 4), wpe = Uniform(maxT * C, 5), w = Uniform(B * T * C, 6);
  auto dwte = Up(Floats(Vp * C, 0.0f), {Vp, C}), dwpe = Up(Floats(maxT * C, 0.0f), {maxT, C});
  ASSERT_TRUE(be().EmbeddingBackward(dwte.t(), dwpe.t(), Up(w, {B, T, C}).t(), Up(tok, {B, T}).t(),
                                     Up(pos, {B, T}).t(), 0)
                  .ok());
  const Vec wd = D(w);
  auto num_wte = NumericGrad(
      D(wte), [&](const Vec& x) { return ref::Dot(ref::Embedding(tok, pos, C, x, D(wpe)), wd); });
  auto num_wpe = NumericGrad(
      D(wpe), [&](const Vec& x) { return ref::Dot(ref::Embedding(tok, pos, C, D(wte), x), wd); });
  EXPECT_TRUE(AllClose(dwte.Get(), num_wte, kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dwpe.Get(), num_wpe, kGradRtol, kGradAtol));
}

TEST_P(BackendOpsTest, EmbeddingShardGradientsMatchFiniteDifferences) {
  // A shard holding rows [2, 5) of a 7-row vocabulary, without wpe: tokens
  // outside the shard contribute nothing and get no gradient.
  const int B = 2, T = 4, C = 5, rows = 3, start = 2;
  const Ints tok = {0, 2, 4, 6, 3, 2, 5, 1};
  const Ints pos = ref::SequencePositions(B, T);
  const Floats wte = Uniform(rows * C, 12), w = Uniform(B * T * C, 13);
  auto dtok = Up(tok, {B, T}), dpos = Up(pos, {B, T});
  auto out = Out({B, T, C});
  ASSERT_TRUE(
      be().EmbeddingForward(out.t(), dtok.t(), dpos.t(), Up(wte, {rows, C}).t(), Tensor(), start)
          .ok());
  const Floats got = out.Get();
  EXPECT_TRUE(AllClose(got, ref::Embedding(tok, pos, C, D(wte), Vec(), start), kFwdRtol, kFwdAtol));
  for (int n : {0, 3, 6, 7}) {  // tokens 0, 6, 5, 1: outside the shard
    for (int c = 0; c < C; ++c) EXPECT_EQ(got[n * C + c], 0.0f) << n << "," << c;
  }
  auto dwte = Up(Floats(rows * C, 0.0f), {rows, C});
  ASSERT_TRUE(
      be().EmbeddingBackward(dwte.t(), Tensor(), Up(w, {B, T, C}).t(), dtok.t(), dpos.t(), start)
          .ok());
  const Vec wd = D(w);
  EXPECT_TRUE(AllClose(dwte.Get(),
                       NumericGrad(D(wte),
                                   [&](const Vec& x) {
                                     return ref::Dot(ref::Embedding(tok, pos, C, x, Vec(), start),
                                                     wd);
                                   }),
                       kGradRtol, kGradAtol));
}

// dwte/dwpe accumulate; the result is deterministic.
TEST_P(BackendOpsTest, EmbeddingBackwardAccumulatesAndIsDeterministic) {
  const int B = 3, T = 41, C = 77, Vp = 16, maxT = 41;
  const Ints tok = RandomInts(B * T, 7, Vp);
  const Ints pos = ref::SequencePositions(B, T);
  auto dtok = Up(tok, {B, T}), dpos = Up(pos, {B, T});
  auto dout = Up(Uniform(B * T * C, 8), {B, T, C});
  const Floats pre_wte = Uniform(Vp * C, 9), pre_wpe = Uniform(maxT * C, 10);
  auto run = [&](const Floats& init_wte, const Floats& init_wpe) {
    auto dwte = Up(init_wte, {Vp, C}), dwpe = Up(init_wpe, {maxT, C});
    EXPECT_TRUE(be().EmbeddingBackward(dwte.t(), dwpe.t(), dout.t(), dtok.t(), dpos.t(), 0).ok());
    return Concat(dwte.Get(), dwpe.Get());
  };
  const Floats fresh = run(Floats(Vp * C, 0.0f), Floats(maxT * C, 0.0f));
  const Floats acc = run(pre_wte, pre_wpe);
  const Floats pre = Concat(pre_wte, pre_wpe);
  Vec want(pre.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = double{pre[i]} + fresh[i];
  EXPECT_TRUE(AllClose(acc, want, kAccRtol, kAccAtol));
  ExpectDeterministic([&] { return run(pre_wte, pre_wpe); });
}

TEST_F(CpuOnlyOpsTest, EmbeddingBackwardIsTheSameForThreadCounts) {
  const int B = 4, T = 64, C = 80, Vp = 16, maxT = 64;  // above the parallel threshold
  auto tok = Up(RandomInts(B * T, 7, Vp), {B, T}), pos = Up(ref::SequencePositions(B, T), {B, T});
  auto dout = Up(Uniform(B * T * C, 8), {B, T, C});
  const Floats pre_wte = Uniform(Vp * C, 9), pre_wpe = Uniform(maxT * C, 10);
  ExpectSameForThreadCounts([&] {
    auto dwte = Up(pre_wte, {Vp, C}), dwpe = Up(pre_wpe, {maxT, C});
    EXPECT_TRUE(be().EmbeddingBackward(dwte.t(), dwpe.t(), dout.t(), tok.t(), pos.t(), 0).ok());
    return Concat(dwte.Get(), dwpe.Get());
  });
}

// Tensor parallelism's vocabulary-parallel embedding, with a plain loop in
// place of the all-reduce: T shards of Vp/T rows each, wpe on shard 0 only.
// The sum of the shard lookups is the unsplit lookup and each shard's dwte is
// its rows of the unsplit dwte, both bitwise: every element is the same sum
// with zeros added (exact).
TEST_P(BackendOpsTest, EmbeddingShardsSumToTheUnsplitLookup) {
  const int B = 3, T = 43, C = 80, Vp = 16, maxT = 43;
  const Ints tok = RandomInts(B * T, 14, Vp);
  const Floats wte = Uniform(Vp * C, 15), wpe = Uniform(maxT * C, 16);
  auto dtok = Up(tok, {B, T}), dpos = Up(ref::SequencePositions(B, T), {B, T});
  auto dwpe_in = Up(wpe, {maxT, C}), dout = Up(Uniform(B * T * C, 17), {B, T, C});
  auto out = Out({B, T, C});
  auto dwte = Up(Floats(Vp * C, 0.0f), {Vp, C}), dwpe = Up(Floats(maxT * C, 0.0f), {maxT, C});
  ASSERT_TRUE(
      be().EmbeddingForward(out.t(), dtok.t(), dpos.t(), Up(wte, {Vp, C}).t(), dwpe_in.t(), 0)
          .ok());
  ASSERT_TRUE(be().EmbeddingBackward(dwte.t(), dwpe.t(), dout.t(), dtok.t(), dpos.t(), 0).ok());
  const Floats whole = out.Get(), dwte_whole = dwte.Get(), dwpe_whole = dwpe.Get();
  for (int shards : {2, 4}) {
    const int rows = Vp / shards;
    Floats sum(B * T * C, 0.0f);
    for (int k = 0; k < shards; ++k) {
      const int start = k * rows;
      auto w = Up(Floats(wte.begin() + start * C, wte.begin() + (start + rows) * C), {rows, C});
      auto part = Out({B, T, C});
      auto dw = Up(Floats(rows * C, 0.0f), {rows, C}), dp = Up(Floats(maxT * C, 0.0f), {maxT, C});
      ASSERT_TRUE(be().EmbeddingForward(part.t(), dtok.t(), dpos.t(), w.t(),
                                        k == 0 ? dwpe_in.t() : Tensor(), start)
                      .ok());
      const Floats p = part.Get();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];  // the all-reduce
      ASSERT_TRUE(be().EmbeddingBackward(dw.t(), k == 0 ? dp.t() : Tensor(), dout.t(), dtok.t(),
                                         dpos.t(), start)
                      .ok());
      EXPECT_TRUE(BitwiseEqual(dw.Get(), Floats(dwte_whole.begin() + start * C,
                                                dwte_whole.begin() + (start + rows) * C)))
          << "shard " << k << " of " << shards;
      if (k == 0) {
        EXPECT_TRUE(BitwiseEqual(dp.Get(), dwpe_whole)) << shards << " shards";
      }
    }
    EXPECT_TRUE(BitwiseEqual(sum, whole)) << shards << " shards";
  }
}

TEST_P(BackendOpsTest, EmbeddingRejectsBadShapes) {
  const int B = 2, T = 3, C = 4, Vp = 5, maxT = 3;
  auto tok = Up(Ints{0, 1, 2, 3, 4, 0}, {B, T}), pos = Up(ref::SequencePositions(B, T), {B, T});
  auto wte = Out({Vp, C}), wpe = Out({maxT, C}), out = Out({B, T, C});
  EXPECT_TRUE(be().EmbeddingForward(out.t(), tok.t(), pos.t(), wte.t(), wpe.t(), 0).ok());
  ExpectInvalid(be().EmbeddingForward(out.t({B, T, C - 1}), tok.t(), pos.t(), wte.t(), wpe.t(), 0),
                "EmbeddingForward");
  ExpectInvalid(be().EmbeddingForward(out.t(), tok.t(), pos.t(), wte.t(), wpe.t(), -1),
                "vocab_start");
  ExpectInvalid(be().EmbeddingForward(out.t(), tok.t(), pos.t({B * T - 1}), wte.t(), wpe.t(), 0),
                "positions");
  ExpectInvalid(be().EmbeddingBackward(wte.t(), wpe.t(), out.t({B, T, C - 1}), tok.t(), pos.t(), 0),
                "EmbeddingBackward");
}

// Ids that live on the device are checked by the CPU backend only (see the
// header comment): a negative token, a position outside [0, maxT).
TEST_F(CpuOnlyOpsTest, EmbeddingRejectsBadIds) {
  const int B = 2, T = 3, C = 4, Vp = 5, maxT = 3;
  Ints tok = {0, 1, 2, 3, 4, 0};
  auto pos = Up(ref::SequencePositions(B, T), {B, T});
  auto wte = Out({Vp, C}), wpe = Out({maxT, C}), out = Out({B, T, C}), small_wpe = Out({2, C});
  ExpectInvalid(  // position 2 >= maxT
      be().EmbeddingForward(out.t(), Up(tok, {B, T}).t(), pos.t(), wte.t(), small_wpe.t(), 0),
      "EmbeddingForward");
  tok[4] = Vp;  // beyond this shard: legal, it contributes nothing
  EXPECT_TRUE(
      be().EmbeddingForward(out.t(), Up(tok, {B, T}).t(), pos.t(), wte.t(), wpe.t(), 0).ok());
  tok[4] = -1;  // not a token at all
  ExpectInvalid(be().EmbeddingForward(out.t(), Up(tok, {B, T}).t(), pos.t(), wte.t(), wpe.t(), 0),
                "EmbeddingForward");
  ExpectInvalid(be().EmbeddingBackward(wte.t(), wpe.t(), out.t(), Up(tok, {B, T}).t(), pos.t(), 0),
                "EmbeddingBackward");
  const int N = 9;
  Ints p = {37, 0, 5, 5, 36, 12, 0, 39, 21};
  auto wte2 = Out({13, 24}), wpe2 = Out({40, 24}), out2 = Out({N, 24}), dwte2 = Out({13, 24}),
       dwpe2 = Out({40, 24});
  auto tok2 = Up(RandomInts(N, 31, 13), {N});
  for (int32_t bad : {40, -1}) {
    p[4] = bad;
    ExpectInvalid(be().EmbeddingForward(out2.t(), tok2.t(), Up(p, {N}).t(), wte2.t(), wpe2.t(), 0),
                  "positions[4]");
    ExpectInvalid(
        be().EmbeddingBackward(dwte2.t(), dwpe2.t(), out2.t(), tok2.t(), Up(p, {N}).t(), 0),
        "positions[4]");
  }
}

// Explicit positions, as a cached decode step has them: tokens of several
// sequences, each at its own position, in no order, some positions shared
// and some never used.
TEST_P(BackendOpsTest, EmbeddingTakesExplicitPositions) {
  const int N = 9, C = 23, Vp = 13, maxT = 40;
  const Ints tok = RandomInts(N, 31, Vp);
  const Ints pos = {37, 0, 5, 5, 36, 12, 0, 39, 21};
  const Floats wte = Uniform(Vp * C, 32), wpe = Uniform(maxT * C, 33), w = Uniform(N * C, 34);
  auto dtok = Up(tok, {N}), dpos = Up(pos, {N});
  auto dwte_in = Up(wte, {Vp, C}), dwpe_in = Up(wpe, {maxT, C});
  auto out = Out({N, C});
  ASSERT_TRUE(be().EmbeddingForward(out.t(), dtok.t(), dpos.t(), dwte_in.t(), dwpe_in.t(), 0).ok());
  EXPECT_TRUE(AllClose(out.Get(), ref::Embedding(tok, pos, C, D(wte), D(wpe)), kFwdRtol, kFwdAtol));

  auto dwte = Up(Floats(Vp * C, 0.0f), {Vp, C}), dwpe = Up(Floats(maxT * C, 0.0f), {maxT, C});
  ASSERT_TRUE(
      be().EmbeddingBackward(dwte.t(), dwpe.t(), Up(w, {N, C}).t(), dtok.t(), dpos.t(), 0).ok());
  const Vec wd = D(w);
  EXPECT_TRUE(AllClose(dwte.Get(),
                       NumericGrad(D(wte),
                                   [&](const Vec& x) {
                                     return ref::Dot(ref::Embedding(tok, pos, C, x, D(wpe)), wd);
                                   }),
                       kGradRtol, kGradAtol));
  const Floats gwpe = dwpe.Get();
  EXPECT_TRUE(AllClose(gwpe,
                       NumericGrad(D(wpe),
                                   [&](const Vec& x) {
                                     return ref::Dot(ref::Embedding(tok, pos, C, D(wte), x), wd);
                                   }),
                       kGradRtol, kGradAtol));
  for (int c = 0; c < C; ++c) EXPECT_EQ(gwpe[1 * C + c], 0.0f);  // position 1: no token there

  // No token table: the position rows alone (the int8 model's lookup).
  out.Poison();
  ASSERT_TRUE(be().EmbeddingForward(out.t(), dtok.t(), dpos.t(), Tensor(), dwpe_in.t(), 0).ok());
  EXPECT_TRUE(AllClose(out.Get(), ref::Embedding(tok, pos, C, Vec(), D(wpe)), kFwdRtol, kFwdAtol));
}

// The backward with explicit positions sums each row in token order, also
// where many tokens share a position and a token.
TEST_P(BackendOpsTest, EmbeddingBackwardWithPositionsMatchesAndIsDeterministic) {
  const int N = 301, C = 95, Vp = 8, maxT = 6;
  const Ints tok = RandomInts(N, 41, Vp), pos = RandomInts(N, 42, maxT);
  const Floats g = Uniform(N * C, 43);
  auto dtok = Up(tok, {N}), dpos = Up(pos, {N});
  auto dout = Up(g, {N, C});
  auto run = [&] {
    auto dwte = Up(Floats(Vp * C, 0.0f), {Vp, C}), dwpe = Up(Floats(maxT * C, 0.0f), {maxT, C});
    EXPECT_TRUE(be().EmbeddingBackward(dwte.t(), dwpe.t(), dout.t(), dtok.t(), dpos.t(), 0).ok());
    return Concat(dwte.Get(), dwpe.Get());
  };
  Vec want((Vp + maxT) * C, 0.0);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      want[tok[n] * C + c] += g[n * C + c];
      want[(Vp + pos[n]) * C + c] += g[n * C + c];
    }
  }
  EXPECT_TRUE(AllClose(run(), want, kFwdRtol, kFwdAtol));
  ExpectDeterministic(run);
}

TEST_F(CpuOnlyOpsTest, EmbeddingBackwardWithPositionsIsTheSameForThreadCounts) {
  const int N = 300, C = 96, Vp = 8, maxT = 6;  // above the parallel threshold
  auto tok = Up(RandomInts(N, 41, Vp), {N}), pos = Up(RandomInts(N, 42, maxT), {N});
  auto dout = Up(Uniform(N * C, 43), {N, C});
  ExpectSameForThreadCounts([&] {
    auto dwte = Up(Floats(Vp * C, 0.0f), {Vp, C}), dwpe = Up(Floats(maxT * C, 0.0f), {maxT, C});
    EXPECT_TRUE(be().EmbeddingBackward(dwte.t(), dwpe.t(), dout.t(), tok.t(), pos.t(), 0).ok());
    return Concat(dwte.Get(), dwpe.Get());
  });
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
TEST_P(BackendOpsTest, ResidualAddEqualsTheFusedOpsResidual) {
  const int C = 53;
  LnData d(7, C, 5);
  const int N = d.N;
  auto in = Up(d.in, {N, C}), br = Up(d.branch, {N, C});
  auto sum = Out({N, C}), res = Out({N, C}), y = Out({N, C}), mean = Out({N}), rstd = Out({N});
  ASSERT_TRUE(be().ResidualAdd(sum.t(), in.t(), br.t()).ok());
  ASSERT_TRUE(be().ResidualLayerNormForward(res.t(), y.t(), mean.t(), rstd.t(), in.t(), br.t(),
                                            Up(d.gamma, {C}).t(), Up(d.beta, {C}).t())
                  .ok());
  const Floats s = sum.Get();
  EXPECT_TRUE(BitwiseEqual(s, res.Get()));
  for (int i = 0; i < N * C; ++i) ASSERT_EQ(s[i], d.in[i] + d.branch[i]) << i;
  // out may alias an input.
  ASSERT_TRUE(be().ResidualAdd(in.t(), in.t(), br.t()).ok());
  EXPECT_TRUE(BitwiseEqual(in.Get(), s));
  ExpectInvalid(be().ResidualAdd(sum.t(), in.t(), br.t({C})), "ResidualAdd");
}

TEST_P(BackendOpsTest, ResidualLayerNormForwardMatchesReference) {
  for (int C : {37, 768, 1}) {
    LnData d(9, C, 11);
    const int N = d.N;
    SCOPED_TRACE(::testing::Message() << "C=" << C);
    // Row 0 has variance ~1e-6, where eps = 1e-5 dominates, and row 1 is all
    // zeros (rstd = 1/sqrt(eps), y = beta): both pin down eps.
    for (int c = 0; c < C; ++c) {
      d.in[c] = 0.001f * d.in[c];
      d.branch[c] = 0.0f;
      d.in[C + c] = d.branch[C + c] = 0.0f;
    }
    auto res = Out({3, 3, C}), y = Out({3, 3, C}), mean = Out({3, 3}), rstd = Out({3, 3});
    // A [B,T,C] view: row-wise ops only look at the last dimension.
    ASSERT_TRUE(be().ResidualLayerNormForward(res.t(), y.t(), mean.t(), rstd.t(),
                                              Up(d.in, {3, 3, C}).t(), Up(d.branch, {3, 3, C}).t(),
                                              Up(d.gamma, {C}).t(), Up(d.beta, {C}).t())
                    .ok());
    const Vec br = D(d.branch);
    auto want = ref::ResidualLayerNorm(D(d.in), &br, D(d.gamma), D(d.beta), N, C);
    EXPECT_TRUE(AllClose(res.Get(), want.residual_out, kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(y.Get(), want.y, kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(mean.Get(), want.mean, kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(rstd.Get(), want.rstd, kFwdRtol, kFwdAtol));
  }
}

TEST_P(BackendOpsTest, LayerNormWithEmptyBranchReadsResidualIn) {
  LnData d(5, 21, 21);
  const int N = d.N, C = d.C;
  auto in = Up(d.in, {N, C}), gamma = Up(d.gamma, {C}), beta = Up(d.beta, {C});
  auto y = Out({N, C}), mean = Out({N}), rstd = Out({N});
  ASSERT_TRUE(be().ResidualLayerNormForward(Tensor(), y.t(), mean.t(), rstd.t(), in.t(), Tensor(),
                                            gamma.t(), beta.t())
                  .ok());
  auto want = ref::ResidualLayerNorm(D(d.in), nullptr, D(d.gamma), D(d.beta), N, C);
  EXPECT_TRUE(AllClose(y.Get(), want.y, kFwdRtol, kFwdAtol));
  EXPECT_TRUE(AllClose(mean.Get(), want.mean, kFwdRtol, kFwdAtol));
  EXPECT_TRUE(AllClose(rstd.Get(), want.rstd, kFwdRtol, kFwdAtol));
  // No branch means no residual_out either.
  auto res = Out({N, C});
  ExpectInvalid(be().ResidualLayerNormForward(res.t(), y.t(), mean.t(), rstd.t(), in.t(), Tensor(),
                                              gamma.t(), beta.t()),
                "ResidualLayerNormForward");
}

TEST_P(BackendOpsTest, ResidualLayerNormGradientsMatchFiniteDifferences) {
  LnData d(5, 19, 31);
  const int N = d.N, C = d.C;
  auto res = Out({N, C}), y = Out({N, C}), mean = Out({N}), rstd = Out({N});
  auto gamma = Up(d.gamma, {C});
  ASSERT_TRUE(be().ResidualLayerNormForward(res.t(), y.t(), mean.t(), rstd.t(),
                                            Up(d.in, {N, C}).t(), Up(d.branch, {N, C}).t(),
                                            gamma.t(), Up(d.beta, {C}).t())
                  .ok());
  const Floats w = Uniform(N * C, 32);
  auto dres = Up(Floats(N * C, 0.0f), {N, C}), dgamma = Up(Floats(C, 0.0f), {C}),
       dbeta = Up(Floats(C, 0.0f), {C});
  ASSERT_TRUE(be().ResidualLayerNormBackward(dres.t(), dgamma.t(), dbeta.t(), Up(w, {N, C}).t(),
                                             res.t(), gamma.t(), mean.t(), rstd.t())
                  .ok());
  const Vec in = D(d.in), br = D(d.branch), ga = D(d.gamma), be_ = D(d.beta), wd = D(w);
  auto loss = [&](const Vec& i, const Vec& b, const Vec& g, const Vec& e) {
    return ref::Dot(ref::ResidualLayerNorm(i, &b, g, e, N, C).y, wd);
  };
  const Floats gres = dres.Get();
  // residual_out = in + branch, so both inputs get the same gradient, d_residual.
  EXPECT_TRUE(AllClose(gres, NumericGrad(in, [&](const Vec& x) { return loss(x, br, ga, be_); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(gres, NumericGrad(br, [&](const Vec& x) { return loss(in, x, ga, be_); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dgamma.Get(),
                       NumericGrad(ga, [&](const Vec& x) { return loss(in, br, x, be_); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dbeta.Get(),
                       NumericGrad(be_, [&](const Vec& x) { return loss(in, br, ga, x); }),
                       kGradRtol, kGradAtol));
}

// The LayerNorm backward of d (no branch) from the given starting gradients.
Floats LayerNormBackward(testing_backends::BackendHarness& h, const LnData& d,
                         DeviceArray<float>& in, DeviceArray<float>& gamma,
                         DeviceArray<float>& mean, DeviceArray<float>& rstd, DeviceArray<float>& dy,
                         const Floats& r0, const Floats& g0, const Floats& b0) {
  const int N = d.N, C = d.C;
  auto dres = h.Up(r0, {N, C}), dg = h.Up(g0, {C}), db = h.Up(b0, {C});
  EXPECT_TRUE(h.be()
                  .ResidualLayerNormBackward(dres.t(), dg.t(), db.t(), dy.t(), in.t(), gamma.t(),
                                             mean.t(), rstd.t())
                  .ok());
  return Concat(Concat(dres.Get(), dg.Get()), db.Get());
}

TEST_P(BackendOpsTest, LayerNormBackwardAccumulatesAndIsDeterministic) {
  LnData d(201, 47, 41);  // 201 rows: several row chunks, the last one partial
  const int N = d.N, C = d.C;
  auto in = Up(d.in, {N, C}), gamma = Up(d.gamma, {C});
  auto y = Out({N, C}), mean = Out({N}), rstd = Out({N});
  ASSERT_TRUE(be().ResidualLayerNormForward(Tensor(), y.t(), mean.t(), rstd.t(), in.t(), Tensor(),
                                            gamma.t(), Up(d.beta, {C}).t())
                  .ok());
  auto dy = Up(Uniform(N * C, 42), {N, C});
  const Floats pre_res = Uniform(N * C, 43), pre_g = Uniform(C, 44), pre_b = Uniform(C, 45);
  auto run = [&](const Floats& r0, const Floats& g0, const Floats& b0) {
    return LayerNormBackward(*this, d, in, gamma, mean, rstd, dy, r0, g0, b0);
  };
  const Floats fresh = run(Floats(N * C, 0.0f), Floats(C, 0.0f), Floats(C, 0.0f));
  const Floats acc = run(pre_res, pre_g, pre_b);
  const Floats pre = Concat(Concat(pre_res, pre_g), pre_b);
  Vec want(pre.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = double{pre[i]} + fresh[i];
  // dgamma/dbeta are sums over 201 rows: allow their float rounding.
  EXPECT_TRUE(AllClose(acc, want, kAccRtol, 1e-5));
  ExpectDeterministic([&] { return run(pre_res, pre_g, pre_b); });
}

TEST_F(CpuOnlyOpsTest, LayerNormBackwardIsTheSameForThreadCounts) {
  LnData d(200, 48, 41);
  const int N = d.N, C = d.C;
  auto in = Up(d.in, {N, C}), gamma = Up(d.gamma, {C});
  auto y = Out({N, C}), mean = Out({N}), rstd = Out({N});
  ASSERT_TRUE(be().ResidualLayerNormForward(Tensor(), y.t(), mean.t(), rstd.t(), in.t(), Tensor(),
                                            gamma.t(), Up(d.beta, {C}).t())
                  .ok());
  auto dy = Up(Uniform(N * C, 42), {N, C});
  const Floats pre_res = Uniform(N * C, 43), pre_g = Uniform(C, 44), pre_b = Uniform(C, 45);
  ExpectSameForThreadCounts([&] {
    return LayerNormBackward(*this, d, in, gamma, mean, rstd, dy, pre_res, pre_g, pre_b);
  });
}

TEST_P(BackendOpsTest, LayerNormRejectsBadShapes) {
  const int N = 3, C = 8;
  auto in = Out({N, C}), br = Out({N, C}), res = Out({N, C}), y = Out({N, C}), mean = Out({N}),
       rstd = Out({N}), g = Out({C}), b = Out({C}), g2 = Out({C + 1});
  ExpectInvalid(be().ResidualLayerNormForward(res.t(), y.t(), mean.t(), rstd.t(), in.t(), br.t(),
                                              g2.t(), b.t()),
                "gamma");
  ExpectInvalid(be().ResidualLayerNormForward(res.t(), y.t(), mean.t({N - 1}), rstd.t(), in.t(),
                                              br.t(), g.t(), b.t()),
                "mean");
  ExpectInvalid(be().ResidualLayerNormBackward(res.t(), g.t(), b.t(), y.t({C, N}), in.t(), g.t(),
                                               mean.t(), rstd.t()),
                "ResidualLayerNormBackward");
}

// ---- matmul --------------------------------------------------------------------

TEST_P(BackendOpsTest, MatmulForwardMatchesReference) {
  struct Shape {
    int N, C, OC;
  };
  uint32_t seed = 50;
  for (Shape s : {Shape{33, 70, 45}, Shape{1, 1, 1}, Shape{7, 129, 65}, Shape{67, 31, 3}}) {
    const int N = s.N, C = s.C, OC = s.OC;
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " OC=" << OC);
    const Floats inp = Uniform(N * C, ++seed), w = Uniform(OC * C, ++seed), b = Uniform(OC, ++seed);
    auto dinp = Up(inp, {N, C}), dw = Up(w, {OC, C});
    auto out = Out({N, OC});
    ASSERT_TRUE(be().MatmulForward(out.t(), dinp.t(), dw.t(), Up(b, {OC}).t()).ok());
    const Vec bd = D(b);
    EXPECT_TRUE(AllClose(out.Get(), ref::Matmul(D(inp), D(w), &bd, N, C, OC), kFwdRtol, kFwdAtol));
    out.Poison();
    ASSERT_TRUE(be().MatmulForward(out.t(), dinp.t(), dw.t(), Tensor()).ok());
    EXPECT_TRUE(
        AllClose(out.Get(), ref::Matmul(D(inp), D(w), nullptr, N, C, OC), kFwdRtol, kFwdAtol));
  }
}

// The fused up projection: pre is the plain matmul, out its GELU. OC = 16
// takes a GPU's cuBLASLt epilogue, OC = 12 (not a multiple of 8) the matmul
// then the GELU kernel.
TEST_P(BackendOpsTest, MatmulGeluForwardMatchesReference) {
  uint32_t seed = 400;
  for (const int OC : {16, 12}) {
    const int N = 9, C = 24;
    SCOPED_TRACE(::testing::Message() << "OC=" << OC);
    const Floats inp = Uniform(N * C, ++seed), w = Uniform(OC * C, ++seed), b = Uniform(OC, ++seed);
    auto dinp = Up(inp, {N, C}), dw = Up(w, {OC, C});
    auto out = Out({N, OC}), pre = Out({N, OC});
    ASSERT_TRUE(be().MatmulGeluForward(out.t(), pre.t(), dinp.t(), dw.t(), Up(b, {OC}).t()).ok());
    const Vec bd = D(b);
    const Vec want_pre = ref::Matmul(D(inp), D(w), &bd, N, C, OC);
    EXPECT_TRUE(AllClose(pre.Get(), want_pre, kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(out.Get(), ref::Gelu(want_pre), kFwdRtol, kFwdAtol));
    ExpectInvalid(be().MatmulGeluForward(pre.t(), pre.t(), dinp.t(), dw.t(), Tensor()),
                  "MatmulGeluForward");
  }
}

// The fused down projection's backward: gradients of
// loss = dout . (gelu(pre) @ w^T + b) by finite differences in pre, w and b
// (so dpre = (dout @ w) * gelu'(pre)), dweight and dbias accumulated onto
// zeros. C = 16 takes a GPU's cuBLASLt DGELU epilogue, C = 12 (not a
// multiple of 8) the backward then the GELU kernel.
TEST_P(BackendOpsTest, MatmulGeluBackwardMatchesFiniteDifferences) {
  uint32_t seed = 450;
  for (const int C : {16, 12}) {
    const int N = 3, OC = 5;
    SCOPED_TRACE(::testing::Message() << "C=" << C);
    const Floats pre = Uniform(N * C, ++seed, -2.0f, 2.0f), w = Uniform(OC * C, ++seed);
    const Floats b = Uniform(OC, ++seed), dout = Uniform(N * OC, ++seed);
    const Vec gelu = ref::Gelu(D(pre));
    const Floats inp(gelu.begin(), gelu.end());
    auto dpre = Out({N, C});  // overwritten: starts as NaN
    auto dw = Up(Floats(OC * C, 0.0f), {OC, C}), db = Up(Floats(OC, 0.0f), {OC});
    auto pre_t = Up(pre, {N, C});
    ASSERT_TRUE(be().MatmulGeluBackward(dpre.t(), dw.t(), db.t(), Up(dout, {N, OC}).t(),
                                        Up(inp, {N, C}).t(), Up(w, {OC, C}).t(), pre_t.t())
                    .ok());
    const Vec pd = D(pre), wd = D(w), bd = D(b), g = D(dout);
    auto loss = [&](const Vec& p, const Vec& ww, const Vec& bb) {
      return ref::Dot(ref::Matmul(ref::Gelu(p), ww, &bb, N, C, OC), g);
    };
    EXPECT_TRUE(AllClose(dpre.Get(), NumericGrad(pd, [&](const Vec& x) { return loss(x, wd, bd); }),
                         kGradRtol, kGradAtol));
    EXPECT_TRUE(AllClose(dw.Get(), NumericGrad(wd, [&](const Vec& x) { return loss(pd, x, bd); }),
                         kGradRtol, kGradAtol));
    EXPECT_TRUE(AllClose(db.Get(), NumericGrad(bd, [&](const Vec& x) { return loss(pd, wd, x); }),
                         kGradRtol, kGradAtol));
    ExpectInvalid(be().MatmulGeluBackward(pre_t.t(), dw.t(), db.t(), Up(dout, {N, OC}).t(),
                                          Up(inp, {N, C}).t(), Up(w, {OC, C}).t(), pre_t.t()),
                  "MatmulGeluBackward");
  }
}

TEST_P(BackendOpsTest, MatmulGradientsMatchFiniteDifferences) {
  const int N = 3, C = 5, OC = 4;
  const Floats inp = Uniform(N * C, 61), w = Uniform(OC * C, 62), b = Uniform(OC, 63);
  const Floats dout = Uniform(N * OC, 64);
  auto dinp = Out({N, C});  // overwritten: starts as NaN
  auto dw = Up(Floats(OC * C, 0.0f), {OC, C}), db = Up(Floats(OC, 0.0f), {OC});
  ASSERT_TRUE(be().MatmulBackward(dinp.t(), dw.t(), db.t(), Up(dout, {N, OC}).t(),
                                  Up(inp, {N, C}).t(), Up(w, {OC, C}).t())
                  .ok());
  const Vec id = D(inp), wd = D(w), bd = D(b), g = D(dout);
  auto loss = [&](const Vec& i, const Vec& ww, const Vec& bb) {
    return ref::Dot(ref::Matmul(i, ww, &bb, N, C, OC), g);
  };
  EXPECT_TRUE(AllClose(dinp.Get(), NumericGrad(id, [&](const Vec& x) { return loss(x, wd, bd); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(dw.Get(), NumericGrad(wd, [&](const Vec& x) { return loss(id, x, bd); }),
                       kGradRtol, kGradAtol));
  EXPECT_TRUE(AllClose(db.Get(), NumericGrad(bd, [&](const Vec& x) { return loss(id, wd, x); }),
                       kGradRtol, kGradAtol));
}

// MatmulBackward of fixed inputs from the given starting dweight/dbias;
// returns dinp (NaN-poisoned first; left so when skipped), dweight, dbias.
struct MatmulBackwardCase {
  int N, C, OC;
  DeviceArray<float> inp, w, dout;
  Floats Run(testing_backends::BackendHarness& h, const Floats& w0, const Floats& b0,
             bool with_dinp) {
    auto dinp = h.Out({N, C});
    auto dw = h.Up(w0, {OC, C}), db = h.Up(b0, {OC});
    EXPECT_TRUE(h.be()
                    .MatmulBackward(with_dinp ? dinp.t() : Tensor(), dw.t(), db.t(), dout.t(),
                                    inp.t(), w.t())
                    .ok());
    return Concat(Concat(dinp.Get(), dw.Get()), db.Get());
  }
};

TEST_P(BackendOpsTest, MatmulBackwardAccumulatesSkipsAndIsDeterministic) {
  const int N = 41, C = 23, OC = 37;
  const Floats inp = Uniform(N * C, 71), w = Uniform(OC * C, 72), dout = Uniform(N * OC, 73);
  MatmulBackwardCase mc{N, C, OC, Up(inp, {N, C}), Up(w, {OC, C}), Up(dout, {N, OC})};
  const Floats pre_w = Uniform(OC * C, 74), pre_b = Uniform(OC, 75);
  const Floats fresh = mc.Run(*this, Floats(OC * C, 0.0f), Floats(OC, 0.0f), true);
  const Floats acc = mc.Run(*this, pre_w, pre_b, true);
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
  for (size_t i = N * C; i < want.size(); ++i) want[i] = double{pre[i]} + fresh[i];
  EXPECT_TRUE(AllClose(Floats(acc.begin() + N * C, acc.end()),
                       Vec(want.begin() + N * C, want.end()), kAccRtol, kAccAtol));
  EXPECT_TRUE(BitwiseEqual(Floats(acc.begin(), acc.begin() + N * C),
                           Floats(fresh.begin(), fresh.begin() + N * C)));
  // Empty dinp: skipped (left poisoned), and dweight/dbias come out the same.
  const Floats skipped = mc.Run(*this, pre_w, pre_b, false);
  for (int i = 0; i < N * C; ++i) ASSERT_TRUE(std::isnan(skipped[i])) << "dinp written at " << i;
  EXPECT_TRUE(BitwiseEqual(Floats(skipped.begin() + N * C, skipped.end()),
                           Floats(acc.begin() + N * C, acc.end())));
  ExpectDeterministic([&] { return mc.Run(*this, pre_w, pre_b, true); });
}

// The bias column sums are the CPU backend's own (the GEMMs are OpenBLAS's).
TEST_F(CpuOnlyOpsTest, MatmulBiasGradientIsTheSameForThreadCounts) {
  const int N = 40, C = 24, OC = 36;
  MatmulBackwardCase mc{N,
                        C,
                        OC,
                        Up(Uniform(N * C, 71), {N, C}),
                        Up(Uniform(OC * C, 72), {OC, C}),
                        Up(Uniform(N * OC, 73), {N, OC})};
  const Floats pre_w = Uniform(OC * C, 74), pre_b = Uniform(OC, 75);
  ExpectSameForThreadCounts([&] {
    Floats r = mc.Run(*this, pre_w, pre_b, false);
    return Floats(r.end() - OC, r.end());
  });
}

TEST_P(BackendOpsTest, MatmulRejectsBadShapes) {
  const int N = 4, C = 6, OC = 5;
  auto inp = Out({N, C}), w = Out({OC * C + OC}), b = Out({OC + 1}), out = Out({N, OC}),
       dout = Out({N, OC}), dinp = Out({N, C});
  ExpectInvalid(be().MatmulForward(out.t(), inp.t(), w.t({OC, C + 1}), Tensor()), "weight");
  ExpectInvalid(be().MatmulForward(out.t(), inp.t(), w.t({OC, C}), b.t({OC + 1})), "bias");
  ExpectInvalid(be().MatmulForward(out.t({N, OC - 1}), inp.t(), w.t({OC, C}), Tensor()),
                "MatmulForward");
  ExpectInvalid(be().MatmulBackward(dinp.t(), w.t({OC, C}), Tensor(), dout.t(), inp.t({N - 1, C}),
                                    w.t({OC, C})),
                "inp");
  ExpectInvalid(be().MatmulBackward(dinp.t(), Tensor(), Tensor(), dout.t(), inp.t(), w.t({OC, C})),
                "dweight");
}

// ---- GELU ------------------------------------------------------------------------

TEST_P(BackendOpsTest, GeluForwardMatchesReference) {
  Floats x = Uniform(1001, 81, -6.0f, 6.0f);
  for (float v : {0.0f, -0.0f, 1e-6f, -1e-6f, 10.0f, -10.0f, -20.0f, 30.0f}) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  auto out = Out({n});
  ASSERT_TRUE(be().GeluForward(out.t(), Up(x, {n}).t()).ok());
  EXPECT_TRUE(AllClose(out.Get(), ref::Gelu(D(x)), kFwdRtol, kFwdAtol));
}

TEST_P(BackendOpsTest, GeluGradientMatchesFiniteDifferences) {
  const int N = 7, C = 9;
  const Floats x = Uniform(N * C, 91, -4.0f, 4.0f), w = Uniform(N * C, 92);
  auto dx = Up(x, {N, C}), dw = Up(w, {N, C});
  auto dinp = Out({N, C});
  ASSERT_TRUE(be().GeluBackward(dinp.t(), dw.t(), dx.t()).ok());
  const Floats got = dinp.Get();
  const Vec wd = D(w);
  EXPECT_TRUE(AllClose(got,
                       NumericGrad(D(x), [&](const Vec& v) { return ref::Dot(ref::Gelu(v), wd); }),
                       kGradRtol, kGradAtol));
  // dinp may alias dout.
  ASSERT_TRUE(be().GeluBackward(dw.t(), dw.t(), dx.t()).ok());
  EXPECT_TRUE(BitwiseEqual(dw.Get(), got));
}

TEST_F(CpuOnlyOpsTest, GeluIsTheSameForThreadCounts) {
  const int64_t n = 100003;  // above the parallel threshold, odd chunk boundaries
  auto x = Up(Uniform(n, 93, -5.0f, 5.0f), {n}), dout = Up(Uniform(n, 94), {n});
  ExpectSameForThreadCounts([&] {
    auto out = Out({n}), dinp = Out({n});
    EXPECT_TRUE(be().GeluForward(out.t(), x.t()).ok());
    EXPECT_TRUE(be().GeluBackward(dinp.t(), dout.t(), x.t()).ok());
    return Concat(out.Get(), dinp.Get());
  });
}

TEST_P(BackendOpsTest, GeluRejectsBadShapes) {
  auto a = Out({12}), b = Out({12}), c = Out({12});
  ExpectInvalid(be().GeluForward(a.t({3, 4}), b.t({4, 3})), "GeluForward");
  ExpectInvalid(be().GeluBackward(a.t(), b.t({2, 6}), c.t()), "dout");
}

// ---- cross-entropy ---------------------------------------------------------------

// The forward's statistics and losses for one row block.
struct CeForwardOut {
  Floats row_max, sum_exp, target_logit, loss, lse;
};

// The three forward steps on a single shard holding the whole vocabulary
// (vocab_start 0, no reductions between the steps: one process), on the
// device; lse stays there for the backward.
CeForwardOut CeForward(testing_backends::BackendHarness& h, DeviceArray<float>& logits,
                       DeviceArray<int32_t>& tg, DeviceArray<float>& lse, int N, int V) {
  auto row_max = h.Out({N}), sum_exp = h.Out({N}), target_logit = h.Out({N}), loss = h.Out({N});
  lse.Poison();
  Backend& be = h.be();
  EXPECT_TRUE(be.CrossEntropyRowMax(row_max.t(), logits.t(), 0, V).ok());
  EXPECT_TRUE(
      be.CrossEntropyPartials(sum_exp.t(), target_logit.t(), logits.t(), tg.t(), row_max.t(), 0, V)
          .ok());
  EXPECT_TRUE(
      be.CrossEntropyLoss(loss.t(), lse.t(), row_max.t(), sum_exp.t(), target_logit.t()).ok());
  return {row_max.Get(), sum_exp.Get(), target_logit.Get(), loss.Get(), lse.Get()};
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

TEST_P(BackendOpsTest, CrossEntropyForwardMatchesReferenceAndIgnoresPadding) {
  struct Shape {
    int N, Vp, V;
  };
  uint32_t seed = 100;
  for (Shape s : {Shape{7, 160, 150}, Shape{1, 128, 1}, Shape{13, 384, 257}}) {
    const int N = s.N, Vp = s.Vp, V = s.V;
    SCOPED_TRACE(::testing::Message() << "N=" << N << " Vp=" << Vp << " V=" << V);
    Floats logits = Uniform(N * Vp, ++seed, -4.0f, 4.0f);
    for (int n = 0; n < N; ++n) {
      for (int i = V; i < Vp; ++i) logits[n * Vp + i] = 1e4f;  // padding: must not count
    }
    for (int i = 0; i < V; ++i) logits[(N / 2) * Vp + i] += 1000.0f;  // large logits: stable
    const Ints tg = RandomInts(N, ++seed, V);
    auto dl = Up(logits, {N, Vp});
    auto dtg = Up(tg, {N});
    auto lse = Out({N});
    CeForwardOut o = CeForward(*this, dl, dtg, lse, N, V);
    EXPECT_TRUE(AllClose(o.loss, ref::CrossEntropy(D(logits), tg, N, Vp, V), kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(o.lse, ref::LogSumExp(D(logits), N, Vp, V), kFwdRtol, kFwdAtol));
    for (int n = 0; n < N; ++n) {
      EXPECT_EQ(o.target_logit[n], logits[n * Vp + tg[n]]) << n;
      EXPECT_EQ(o.row_max[n],
                *std::max_element(logits.begin() + n * Vp, logits.begin() + n * Vp + V))
          << n;
    }
  }
}

TEST_P(BackendOpsTest, CrossEntropyGradientMatchesFiniteDifferences) {
  const int N = 3, Vp = 12, V = 10;
  const float dloss = 0.37f;
  const Floats logits = Uniform(N * Vp, 111, -3.0f, 3.0f);
  const Ints tg = {4, 0, 9};
  auto dl = Up(logits, {N, Vp});
  auto dtg = Up(tg, {N});
  auto lse = Out({N});
  CeForward(*this, dl, dtg, lse, N, V);
  auto dlogits = Out({N, Vp});  // padded columns must come back 0
  ASSERT_TRUE(be().CrossEntropyBackward(dlogits.t(), dl.t(), dtg.t(), lse.t(), 0, V, dloss).ok());
  auto num = NumericGrad(D(logits), [&](const Vec& x) {
    double s = 0;
    for (double l : ref::CrossEntropy(x, tg, N, Vp, V)) s += l;
    return double{dloss} * s;
  });
  const Floats got = dlogits.Get();
  EXPECT_TRUE(AllClose(got, num, kGradRtol, kGradAtol));
  for (int n = 0; n < N; ++n) {
    for (int i = V; i < Vp; ++i) EXPECT_EQ(got[n * Vp + i], 0.0f) << n << "," << i;
  }
}

// The fused classifier against the four steps: the CPU runs the steps
// themselves (the same bits); a device's one kernel sums online, so its
// losses, lse and gradient agree within the forward's tolerances, and its
// padding columns come back 0.
TEST_P(BackendOpsTest, CrossEntropyFusedEqualsTheFourSteps) {
  struct Shape {
    int N, Vp, V;
  };
  uint32_t seed = 300;
  // The last is above the CPU's parallel threshold: its rows split over threads.
  for (Shape s : {Shape{7, 160, 150}, Shape{1, 128, 1}, Shape{13, 384, 257}, Shape{3, 61, 61},
                  Shape{37, 640, 600}}) {
    const int N = s.N, Vp = s.Vp, V = s.V;
    SCOPED_TRACE(::testing::Message() << "N=" << N << " Vp=" << Vp << " V=" << V);
    Floats logits = Uniform(N * Vp, ++seed, -6.0f, 6.0f);
    for (int n = 0; n < N; ++n) {
      for (int i = V; i < Vp; ++i) logits[n * Vp + i] = 1e4f;  // padding: must not count
    }
    for (int i = 0; i < V; ++i) logits[(N / 2) * Vp + i] += 1000.0f;
    const Ints tg = RandomInts(N, ++seed, V);
    const float dloss = 0.25f;
    auto steps = Up(logits, {N, Vp});
    auto dtg = Up(tg, {N});
    auto lse = Out({N});
    const CeForwardOut want = CeForward(*this, steps, dtg, lse, N, V);
    ASSERT_TRUE(
        be().CrossEntropyBackward(steps.t(), steps.t(), dtg.t(), lse.t(), 0, V, dloss).ok());
    auto fused = Up(logits, {N, Vp});
    auto loss = Out({N}), fused_lse = Out({N});
    ASSERT_TRUE(be().CrossEntropyFused(loss.t(), fused_lse.t(), fused.t(), dtg.t(), V, dloss).ok());
    const Floats grad = fused.Get();
    if (is_cpu()) {
      EXPECT_TRUE(BitwiseEqual(loss.Get(), want.loss));
      EXPECT_TRUE(BitwiseEqual(fused_lse.Get(), want.lse));
      EXPECT_TRUE(BitwiseEqual(grad, steps.Get()));
    } else {
      EXPECT_TRUE(AllClose(loss.Get(), want.loss, kFwdRtol, kFwdAtol));
      EXPECT_TRUE(AllClose(fused_lse.Get(), want.lse, kFwdRtol, kFwdAtol));
      EXPECT_TRUE(AllClose(grad, steps.Get(), kFwdRtol, kFwdAtol));
    }
    for (int n = 0; n < N; ++n) {
      for (int i = V; i < Vp; ++i) EXPECT_EQ(grad[n * Vp + i], 0.0f) << n << "," << i;
    }
  }
  auto logits = Up(Uniform(8, 1, -1.0f, 1.0f), {2, 4});
  auto dtg = Up(Ints{0, 1}, {2});
  auto a = Out({2}), b = Out({2});
  ExpectInvalid(be().CrossEntropyFused(a.t(), b.t(), logits.t(), dtg.t(), 5, 1.0f), "vocab_size");
}

// The fused classifier splits rows over threads, each thread taking its
// first row's max on its own: the bits must not depend on the split.
TEST_F(CpuOnlyOpsTest, CrossEntropyFusedIsTheSameForThreadCounts) {
  const int N = 37, Vp = 640, V = 600;  // above the parallel threshold
  const Floats logits = Uniform(N * Vp, 310, -6.0f, 6.0f);
  auto dtg = Up(RandomInts(N, 311, V), {N});
  ExpectSameForThreadCounts([&] {
    auto grad = Up(logits, {N, Vp});
    auto loss = Out({N}), lse = Out({N});
    EXPECT_TRUE(be().CrossEntropyFused(loss.t(), lse.t(), grad.t(), dtg.t(), V, 0.5f).ok());
    return Concat(Concat(loss.Get(), lse.Get()), grad.Get());
  });
}

TEST_P(BackendOpsTest, CrossEntropyBackwardInPlaceAndDeterministic) {
  const int N = 9, Vp = 256, V = 251;
  Floats logits = Uniform(N * Vp, 121, -5.0f, 5.0f);
  for (int n = 0; n < N; ++n) logits[n * Vp + V + 1] = 1e4f;  // padding garbage
  const Ints tg = RandomInts(N, 122, V);
  auto dl = Up(logits, {N, Vp});
  auto dtg = Up(tg, {N});
  auto lse = Out({N});
  const CeForwardOut first = CeForward(*this, dl, dtg, lse, N, V);
  const CeForwardOut again = CeForward(*this, dl, dtg, lse, N, V);
  EXPECT_TRUE(
      BitwiseEqual(Concat(Concat(first.row_max, first.sum_exp), Concat(first.loss, first.lse)),
                   Concat(Concat(again.row_max, again.sum_exp), Concat(again.loss, again.lse))));
  auto separate = Out({N, Vp});
  ASSERT_TRUE(be().CrossEntropyBackward(separate.t(), dl.t(), dtg.t(), lse.t(), 0, V, 0.5f).ok());
  ASSERT_TRUE(be().CrossEntropyBackward(dl.t(), dl.t(), dtg.t(), lse.t(), 0, V, 0.5f).ok());
  const Floats inplace = dl.Get();
  EXPECT_TRUE(BitwiseEqual(inplace, separate.Get()));
  const Vec want_lse = ref::LogSumExp(D(logits), N, Vp, V);
  Vec want(N * Vp, 0.0);
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < V; ++i) {
      want[n * Vp + i] = 0.5 * (std::exp(logits[n * Vp + i] - want_lse[n]) - (i == tg[n]));
    }
  }
  EXPECT_TRUE(AllClose(inplace, want, kFwdRtol, kFwdAtol));
  for (int n = 0; n < N; ++n) {
    double row = 0;  // softmax - onehot sums to 0 over the real vocabulary
    for (int i = 0; i < V; ++i) row += inplace[n * Vp + i];
    EXPECT_NEAR(row, 0.0, 1e-6);
    for (int i = V; i < Vp; ++i) EXPECT_EQ(inplace[n * Vp + i], 0.0f);
  }
}

TEST_F(CpuOnlyOpsTest, CrossEntropyIsTheSameForThreadCounts) {
  const int N = 80, Vp = 384, V = 250;  // N * V above the parallel threshold
  auto logits = Up(Uniform(N * Vp, 123, -5.0f, 5.0f), {N, Vp});
  auto tg = Up(RandomInts(N, 124, V), {N});
  auto lse = Out({N});
  ExpectSameForThreadCounts([&] {
    CeForwardOut o = CeForward(*this, logits, tg, lse, N, V);
    auto d = Out({N, Vp});
    EXPECT_TRUE(be().CrossEntropyBackward(d.t(), logits.t(), tg.t(), lse.t(), 0, V, 1.0f).ok());
    return Concat(Concat(Concat(o.row_max, o.sum_exp), Concat(o.loss, o.lse)), d.Get());
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
TEST_P(BackendOpsTest, CrossEntropyShardsMatchTheUnsplitComputation) {
  const int N = 17, Vp = 384, V = 250;
  const float dloss = 0.25f;
  Floats logits = Uniform(N * Vp, 131, -5.0f, 5.0f);
  for (int n = 0; n < N; ++n) {
    for (int i = V; i < Vp; ++i) logits[n * Vp + i] = 1e4f;  // padding garbage
  }
  for (int i = 200; i < V; ++i) logits[3 * Vp + i] += 1000.0f;  // one shard holds the max
  Ints tg = RandomInts(N, 132, V);
  const int edges[] = {0, 95, 96, 191, 192, V - 1};  // targets at the shard boundaries
  for (int i = 0; i < 6; ++i) tg[i] = edges[i];
  auto dl = Up(logits, {N, Vp});
  auto dtg = Up(tg, {N});
  auto whole_lse = Out({N});
  const CeForwardOut whole = CeForward(*this, dl, dtg, whole_lse, N, V);
  auto dwhole_d = Out({N, Vp});
  ASSERT_TRUE(
      be().CrossEntropyBackward(dwhole_d.t(), dl.t(), dtg.t(), whole_lse.t(), 0, V, dloss).ok());
  const Floats dwhole = dwhole_d.Get();
  for (int shards : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << shards << " shards");
    const int Vs = Vp / shards;
    std::vector<DeviceArray<float>> part;
    for (int k = 0; k < shards; ++k)
      part.push_back(Up(Columns(logits, N, Vp, k * Vs, Vs), {N, Vs}));
    // Step 1: shard maxes, all-reduce MAX.
    Floats row_max(N, -std::numeric_limits<float>::infinity());
    for (int k = 0; k < shards; ++k) {
      auto m_d = Out({N});
      ASSERT_TRUE(be().CrossEntropyRowMax(m_d.t(), part[k].t(), k * Vs, V).ok());
      const Floats m = m_d.Get();
      for (int n = 0; n < N; ++n) {
        if (k * Vs >= V) {  // padding only
          EXPECT_EQ(m[n], -std::numeric_limits<float>::max());
        }
        row_max[n] = std::max(row_max[n], m[n]);
      }
    }
    EXPECT_TRUE(BitwiseEqual(row_max, whole.row_max));
    auto row_max_d = Up(row_max, {N});
    // Step 2: partial sums and target logits against the global max, all-reduce SUM.
    Floats sum_exp(N, 0.0f), target_logit(N, 0.0f);
    for (int k = 0; k < shards; ++k) {
      auto s_d = Out({N}), t_d = Out({N});
      ASSERT_TRUE(be().CrossEntropyPartials(s_d.t(), t_d.t(), part[k].t(), dtg.t(), row_max_d.t(),
                                            k * Vs, V)
                      .ok());
      const Floats s = s_d.Get(), t = t_d.Get();
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
    auto loss_d = Out({N}), lse_d = Out({N});
    ASSERT_TRUE(be().CrossEntropyLoss(loss_d.t(), lse_d.t(), row_max_d.t(), Up(sum_exp, {N}).t(),
                                      Up(target_logit, {N}).t())
                    .ok());
    const Floats loss = loss_d.Get(), lse = lse_d.Get();
    EXPECT_TRUE(AllClose(loss, D(whole.loss), kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(lse, D(whole.lse), kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(loss, ref::CrossEntropy(D(logits), tg, N, Vp, V), kFwdRtol, kFwdAtol));
    // Backward: each shard its own columns, in place, from the reduced lse.
    for (int k = 0; k < shards; ++k) {
      ASSERT_TRUE(
          be().CrossEntropyBackward(part[k].t(), part[k].t(), dtg.t(), lse_d.t(), k * Vs, V, dloss)
              .ok());
      const Floats d = part[k].Get();
      EXPECT_TRUE(AllClose(d, D(Columns(dwhole, N, Vp, k * Vs, Vs)), kFwdRtol, kFwdAtol))
          << "shard " << k;
      if (k * Vs >= V) {
        EXPECT_TRUE(BitwiseEqual(d, Floats(N * Vs, 0.0f))) << "shard " << k;
      }
    }
  }
}

TEST_P(BackendOpsTest, CrossEntropyRejectsBadShapes) {
  const int N = 2, Vp = 8;
  auto logits = Up(Floats(N * Vp, 0.0f), {N, Vp}), loss = Out({N + 1}), lse = Out({N}),
       mx = Out({N + 1}), se = Up(Floats(N, 1.0f), {N}), tl = Out({N});
  auto tg = Up(Ints{1, 7}, {N});
  EXPECT_TRUE(be().CrossEntropyRowMax(mx.t({N}), logits.t(), 0, 8).ok());
  ExpectInvalid(be().CrossEntropyRowMax(mx.t(), logits.t(), 0, 8), "row_max");
  ExpectInvalid(be().CrossEntropyRowMax(mx.t({N}), logits.t(), -8, 8), "vocab_start");
  ExpectInvalid(be().CrossEntropyRowMax(mx.t({N}), logits.t(), 0, 0), "vocab_size");
  EXPECT_TRUE(be().CrossEntropyPartials(se.t(), tl.t(), logits.t(), tg.t(), mx.t({N}), 0, 8).ok());
  ExpectInvalid(be().CrossEntropyPartials(se.t(), tl.t({1}), logits.t(), tg.t(), mx.t({N}), 0, 8),
                "target_logit");
  EXPECT_TRUE(be().CrossEntropyLoss(loss.t({N}), lse.t(), mx.t({N}), se.t(), tl.t()).ok());
  ExpectInvalid(be().CrossEntropyLoss(loss.t({N}), lse.t(), mx.t({N}), se.t({1}), tl.t()),
                "sum_exp");
  ExpectInvalid(be().CrossEntropyLoss(Tensor(), lse.t(), mx.t({N}), se.t(), tl.t()), "losses");
  ExpectInvalid(be().CrossEntropyBackward(loss.t({N}), logits.t(), tg.t(), lse.t(), 0, 8, 1.0f),
                "dlogits");
  ExpectInvalid(be().CrossEntropyBackward(logits.t(), logits.t(), tg.t(), lse.t({1}), 0, 8, 1.0f),
                "lse");
}

// Targets live on the device: only the CPU backend range-checks them (the
// CUDA kernels treat an out-of-range target as "not in this shard").
TEST_F(CpuOnlyOpsTest, CrossEntropyRejectsBadTargets) {
  const int N = 2, Vp = 8;
  auto logits = Up(Floats(N * Vp, 0.0f), {N, Vp}), mx = Out({N}), se = Out({N}), tl = Out({N});
  auto tg = Up(Ints{1, 7}, {N});
  ASSERT_TRUE(be().CrossEntropyRowMax(mx.t(), logits.t(), 0, 8).ok());
  ExpectInvalid(be().CrossEntropyPartials(se.t(), tl.t(), logits.t(), tg.t(), mx.t(), 0, 7),
                "targets");  // 7 >= V
}

// ---- optimizer ---------------------------------------------------------------------

TEST_P(BackendOpsTest, SumOfSquaresIsExactEnoughAndDeterministic) {
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{3 * (1 << 14) + 123}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const Floats x = Uniform(n, 131 + n, -3.0f, 3.0f);
    auto dx = Up(x, {n});
    // The result lands in one slot of a vector of sums, the others untouched.
    auto sums = Up(Floats{-1.0f, -1.0f, -1.0f}, {3});
    ASSERT_TRUE(be().SumOfSquares(dx.t(), sums.t().Slice(1, {1})).ok());
    const Floats got = sums.Get();
    const double want = ref::SumOfSquares(x);
    // Accumulated in double, rounded once: within half a float ulp.
    EXPECT_NEAR(got[1], want, 0.6 * std::ldexp(want, -23));
    EXPECT_EQ(got[0], -1.0f);
    EXPECT_EQ(got[2], -1.0f);
    auto again = Out({1});
    ASSERT_TRUE(be().SumOfSquares(dx.t(), again.t()).ok());
    EXPECT_TRUE(BitwiseEqual(again.Get(), Floats{got[1]}));
    ExpectInvalid(be().SumOfSquares(dx.t(), sums.t({2})), "SumOfSquares");
    ExpectInvalid(be().SumOfSquares(dx.t(), Tensor()), "SumOfSquares");
  }
}

TEST_F(CpuOnlyOpsTest, SumOfSquaresIsTheSameForThreadCounts) {
  const int64_t n = 3 * (1 << 14) + 123;  // several chunks, the last one partial
  auto x = Up(Uniform(n, 131, -3.0f, 3.0f), {n});
  ExpectSameForThreadCounts([&] {
    auto s = Out({1});
    EXPECT_TRUE(be().SumOfSquares(x.t(), s.t()).ok());
    return s.Get();
  });
}

TEST_P(BackendOpsTest, AdamWMatchesHandComputedStep) {
  // One element, worked by hand: grad_scale 0.5, step 3, weight decay 0.1.
  //   g = 0.2 * 0.5 = 0.1
  //   m = 0.9 * 0.05 + 0.1 * 0.1 = 0.055        v = 0.999 * 0.004 + 0.001 * 0.01 = 0.004006
  //   mhat = 0.055 / (1 - 0.9^3) = 0.055 / 0.271 = 0.2029520295...
  //   vhat = 0.004006 / (1 - 0.999^3) = 0.004006 / 0.002997001 = 1.3366696...
  //   param = 0.5 - 0.01 * (mhat / (sqrt(vhat) + 1e-8) + 0.1 * 0.5)
  //         = 0.5 - 0.01 * (0.175544... + 0.05) = 0.49774455...
  auto param = Up(Floats{0.5f}, {1}), grad = Up(Floats{0.2f}, {1}), m = Up(Floats{0.05f}, {1}),
       v = Up(Floats{0.004f}, {1});
  AdamWParams p;
  p.lr = 0.01f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-8f;
  p.grad_scale = 0.5f;
  p.step = 3;
  ASSERT_TRUE(be().AdamWUpdate({{param.t(), grad.t(), m.t(), v.t(), 0.1f}}, p).ok());
  const double mhat = 0.055 / 0.271, vhat = 0.004006 / 0.002997001;
  const double want = 0.5 - 0.01 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.05);
  EXPECT_NEAR(m.Get()[0], 0.055, 1e-7);
  EXPECT_NEAR(v.Get()[0], 0.004006, 1e-9);
  const float got = param.Get()[0];
  EXPECT_NEAR(got, want, 1e-7);
  EXPECT_NEAR(got, 0.4977445, 1e-6);
}

// Two tensors in one call, each with its own weight decay (the matrix decays,
// the bias-like vector does not), over three steps.
TEST_P(BackendOpsTest, AdamWMatchesReferenceOverSteps) {
  const int rows = 201, cols = 199, n = rows * cols;  // above the CPU's parallel threshold
  const int nb = 37;
  const float decay[2] = {0.1f, 0.0f};
  const Floats param0 = Uniform(n, 141), bias0 = Uniform(nb, 142);
  auto param = Up(param0, {rows, cols}), m = Up(Floats(n, 0.0f), {rows, cols}),
       v = Up(Floats(n, 0.0f), {rows, cols});
  auto bias = Up(bias0, {nb}), mb = Up(Floats(nb, 0.0f), {nb}), vb = Up(Floats(nb, 0.0f), {nb});
  std::vector<ref::AdamWElem> want(n), want_b(nb);
  for (int i = 0; i < n; ++i) want[i] = {param0[i], 0.0, 0.0};
  for (int i = 0; i < nb; ++i) want_b[i] = {bias0[i], 0.0, 0.0};
  AdamWParams p;
  p.lr = 3e-3f;
  p.grad_scale = 0.8f;
  for (int step = 1; step <= 3; ++step) {
    p.step = step;
    const Floats grad = Uniform(n, 150 + step), grad_b = Uniform(nb, 160 + step);
    auto g = Up(grad, {rows, cols}), gb = Up(grad_b, {nb});
    ASSERT_TRUE(be().AdamWUpdate({{param.t(), g.t(), m.t(), v.t(), decay[0]},
                                  {bias.t(), gb.t(), mb.t(), vb.t(), decay[1]}},
                                 p)
                    .ok());
    for (int i = 0; i < n; ++i) {
      want[i] = ref::AdamW(want[i], grad[i], p.lr, p.beta1, p.beta2, p.eps, decay[0],
                           p.grad_scale, step);
    }
    for (int i = 0; i < nb; ++i) {
      want_b[i] = ref::AdamW(want_b[i], grad_b[i], p.lr, p.beta1, p.beta2, p.eps, decay[1],
                             p.grad_scale, step);
    }
  }
  auto expect = [&](const std::vector<ref::AdamWElem>& w, const Floats& got_p, const Floats& got_m,
                    const Floats& got_v) {
    const size_t k = w.size();
    Vec wp(k), wm(k), wv(k);
    for (size_t i = 0; i < k; ++i) {
      wp[i] = w[i].param;
      wm[i] = w[i].m;
      wv[i] = w[i].v;
    }
    EXPECT_TRUE(AllClose(got_p, wp, kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(got_m, wm, kFwdRtol, kFwdAtol));
    EXPECT_TRUE(AllClose(got_v, wv, kFwdRtol, kFwdAtol));
  };
  expect(want, param.Get(), m.Get(), v.Get());
  expect(want_b, bias.Get(), mb.Get(), vb.Get());
}

TEST_P(BackendOpsTest, AdamWRejectsBadInput) {
  auto a = Out({6}), b = Out({6}), c = Out({6});
  AdamWParams p;
  ExpectInvalid(be().AdamWUpdate({{a.t(), b.t(), c.t(), c.t({5}), 0.0f}}, p), "v[0]");
  p.step = 0;
  ExpectInvalid(be().AdamWUpdate({{a.t(), b.t(), c.t(), c.t(), 0.0f}}, p), "step");
}

TEST_P(BackendOpsTest, FillWritesEveryElement) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{70001}}) {
    auto x = Up(Floats(n + 1, -1.0f), {n + 1});
    ASSERT_TRUE(be().Fill(x.t({n}), 2.5f).ok());
    const Floats got = x.Get();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 2.5f) << i;
    EXPECT_EQ(got[n], -1.0f);  // and not one past the end
  }
  auto i = Out<int32_t>({4});
  ExpectInvalid(be().Fill(i.t(), 1.0f), "Fill");
}

TEST_P(BackendOpsTest, CopyIsBitwiseAndRejectsMismatches) {
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{300001}}) {
    const Floats x = Uniform(n, 71 + static_cast<uint32_t>(n));
    auto src = Up(x, {n});
    auto dst = Out({n + 1});  // poisoned, one element more than the copy
    ASSERT_TRUE(be().Copy(dst.t({n}), src.t()).ok());
    const Floats got = dst.Get();
    EXPECT_TRUE(BitwiseEqual(Floats(got.begin(), got.begin() + n), x)) << n;
    EXPECT_TRUE(std::isnan(got[n])) << "wrote past the end, n=" << n;
  }
  // Another dtype, and a reshape: i32 [3,4] into [12].
  const Ints ids = RandomInts(12, 5, 1000);
  auto isrc = Up(ids, {3, 4});
  auto idst = Out<int32_t>({12});
  ASSERT_TRUE(be().Copy(idst.t(), isrc.t()).ok());
  EXPECT_TRUE(BitwiseEqual(idst.Get(), ids));

  auto a = Out({8}), b = Out({9});
  ExpectInvalid(be().Copy(b.t(), a.t()), "Copy");        // numel
  ExpectInvalid(be().Copy(isrc.t({8}), a.t()), "Copy");  // dtype
  ExpectInvalid(be().Copy(b.t({8}), b.t().Slice(1, {8})), "overlap");
  ExpectInvalid(be().Copy(Tensor(), a.t()), "Copy");  // empty
}

}  // namespace
}  // namespace ladder
