// Tests of Backend::AttentionForward/Backward on every backend of
// backend_test_util.h (cpu, cuda_sim, and cuda where a GPU is usable): flash
// against naive, both against a double-precision reference and finite
// differences, causality, determinism and shape errors. Inputs are uploaded
// to the backend's device, outputs start as NaN and are read back.
//
// Tolerances (below, FwdTol/BwdTol) are the same on every backend: the CUDA
// kernels sum the same fp32 terms in other orders and use the device expf,
// which moves results by a few ulp, well inside them.
// CPU-only: independence of the OpenMP thread count, and the throughput
// report against cblas_sgemm (a measurement of the CPU kernels, printed,
// not asserted).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/core/philox.h"
#include "tests/backend/backend_test_util.h"
#include "tests/backend/reference_ops.h"

namespace ladder {
namespace {

struct Shape {
  int64_t B, T, NH, HS;
  float stddev;  // of q, k, v: larger values make the softmax peakier
  int64_t C() const { return NH * HS; }
};

std::string Name(const Shape& s) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "B=%ld T=%ld NH=%ld HS=%ld sd=%g", static_cast<long>(s.B),
                static_cast<long>(s.T), static_cast<long>(s.NH), static_cast<long>(s.HS), s.stddev);
  return buf;
}

// T = 1, below one tile, exactly one tile, a tile plus a tail, several tiles
// with a tail (flash uses 64 x 64 tiles); NH 1..4; HS 8..64, including one
// that is not a multiple of 8 (the kernels' scalar tails); one case with
// peaky scores, where the online softmax's running max moves a lot between
// key tiles.
const Shape kShapes[] = {
    {2, 1, 1, 8, 1.0f},    {2, 7, 2, 16, 1.0f},  {2, 64, 4, 32, 1.0f},  {2, 100, 3, 64, 1.0f},
    {2, 130, 2, 24, 1.0f}, {2, 70, 3, 12, 1.0f}, {2, 200, 1, 64, 3.0f},
};

struct Problem {
  Shape s;
  std::vector<float> qkv, dout;
};

Problem MakeProblem(const Shape& s, uint64_t seed) {
  Problem p{s, std::vector<float>(s.B * s.T * 3 * s.C()), std::vector<float>(s.B * s.T * s.C())};
  FillNormal(p.qkv.data(), 0, p.qkv.size(), seed, 1, 0.0f, s.stddev);
  FillNormal(p.dout.data(), 0, p.dout.size(), seed, 2, 0.0f, 1.0f);
  return p;
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

// Forward then backward of p on h's backend; outputs start as NaN, and the
// scratch is dirtied between the passes.
Result ForwardBackward(testing_backends::BackendHarness& h, const Problem& p, AttentionKind kind) {
  const Shape& s = p.s;
  auto qkv = h.Up(p.qkv, {s.B, s.T, 3 * s.C()}), dout = h.Up(p.dout, {s.B, s.T, s.C()});
  auto out = h.Out({s.B, s.T, s.C()}), lse = h.Out({s.B, s.NH, s.T});
  auto dqkv = h.Out({s.B, s.T, 3 * s.C()});  // must be overwritten
  const int64_t scratch_n = AttentionScratchFloats(kind, s.B, s.T, s.NH);
  auto scratch = h.Out({std::max<int64_t>(scratch_n, 1)});
  const Tensor scratch_t = scratch_n > 0 ? scratch.t() : Tensor();
  EXPECT_TRUE(h.be().AttentionForward(out.t(), lse.t(), qkv.t(), s.NH, kind, scratch_t).ok());
  // Dirty the scratch: the backward must not rely on what the forward left there.
  EXPECT_TRUE(h.be().Fill(scratch.t(), -7.0f).ok());
  EXPECT_TRUE(
      h.be()
          .AttentionBackward(dqkv.t(), dout.t(), qkv.t(), out.t(), lse.t(), s.NH, kind, scratch_t)
          .ok());
  EXPECT_TRUE(qkv.Get() == p.qkv && dout.Get() == p.dout) << "inputs were modified";
  return {out.Get(), lse.Get(), dqkv.Get()};
}

// Double-precision reference forward (tests/backend/reference_ops.h).
void ReferenceForward(const Shape& s, const std::vector<double>& qkv, std::vector<double>* out,
                      std::vector<double>* lse) {
  ref::CausalAttention(qkv, static_cast<int>(s.B), static_cast<int>(s.T), static_cast<int>(s.NH),
                       static_cast<int>(s.HS), out, lse);
}

// Checks |got - want| <= atol + rtol * |want| elementwise; reports the worst.
template <typename A, typename B>
void ExpectClose(const std::vector<A>& got, const std::vector<B>& want, double atol, double rtol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t worst_i = 0;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    const double excess = err - (atol + rtol * std::fabs(static_cast<double>(want[i])));
    if (excess > 0 || !std::isfinite(static_cast<double>(got[i]))) ++bad;
    if (err > worst) worst = err, worst_i = i;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements out of tolerance; worst abs error "
                    << worst << " at " << worst_i << " (got " << got[worst_i] << ", want "
                    << want[worst_i] << ")";
}

// Tolerances, each used as |got - want| <= tol + tol * |want|.
// Flash and naive compute the same fp32 sums in different orders (block
// products, online rescaling, polynomial exp), so out and lse agree to a few
// ulp of O(1) values: 1e-5. The rounding error of a score q.k grows with the
// size of q and k (stddev sd each), and it reaches out through exp and v, so
// the forward tolerance is scaled by sd^2 (measured worst: 2.7e-5 at sd = 3,
// against 9e-5 allowed).
double FwdTol(const Shape& s) { return 1e-5 * std::max(1.0f, s.stddev * s.stddev); }
// Gradients sum O(T) products of O(1) terms: 1e-4 (times sd^2 as above).
double BwdTol(const Shape& s) { return 1e-4 * std::max(1.0f, s.stddev * s.stddev); }

class AttentionTest : public testing_backends::BackendTest {};
LADDER_INSTANTIATE_ON_ALL_BACKENDS(AttentionTest);

TEST_P(AttentionTest, FlashForwardMatchesNaive) {
  uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    Problem p = MakeProblem(s, seed++);
    Result naive = ForwardBackward(*this, p, AttentionKind::kNaive),
           flash = ForwardBackward(*this, p, AttentionKind::kFlash);
    ExpectClose(flash.out, naive.out, FwdTol(s), FwdTol(s), "out " + Name(s));
    ExpectClose(flash.lse, naive.lse, FwdTol(s), FwdTol(s), "lse " + Name(s));
  }
}

TEST_P(AttentionTest, FlashBackwardMatchesNaive) {
  uint64_t seed = 11;
  for (const Shape& s : kShapes) {
    Problem p = MakeProblem(s, seed++);
    Result naive = ForwardBackward(*this, p, AttentionKind::kNaive),
           flash = ForwardBackward(*this, p, AttentionKind::kFlash);
    ExpectClose(flash.dqkv, naive.dqkv, BwdTol(s), BwdTol(s), "dqkv " + Name(s));
  }
}

TEST_P(AttentionTest, BothMatchDoubleReference) {
  uint64_t seed = 21;
  for (const Shape& s : kShapes) {
    Problem p = MakeProblem(s, seed++);
    std::vector<double> ref_out, ref_lse;
    ReferenceForward(s, std::vector<double>(p.qkv.begin(), p.qkv.end()), &ref_out, &ref_lse);
    for (AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kFlash}) {
      const std::string k = kind == AttentionKind::kNaive ? "naive " : "flash ";
      Result r = ForwardBackward(*this, p, kind);
      ExpectClose(r.out, ref_out, FwdTol(s), FwdTol(s), k + "out " + Name(s));
      ExpectClose(r.lse, ref_lse, FwdTol(s), FwdTol(s), k + "lse " + Name(s));
    }
  }
}

// L = sum(out * W) with W random, so dL/dout = W. Central differences of L on
// the double reference (h = 1e-4, truncation error ~h^2) against the analytical
// dqkv of each variant. A T = 7 case checks every element; a T = 70 case
// (two flash tiles, the second partial) checks a deterministic sample.
TEST_P(AttentionTest, GradientsMatchFiniteDifferences) {
  const Shape shapes[] = {{2, 7, 2, 8, 1.0f}, {2, 70, 2, 16, 1.5f}};
  uint64_t seed = 31;
  for (const Shape& s : shapes) {
    Problem p = MakeProblem(s, seed++);  // p.dout plays W
    std::vector<double> x(p.qkv.begin(), p.qkv.end()), out, lse;
    auto loss = [&](const std::vector<double>& xx) {
      ReferenceForward(s, xx, &out, &lse);
      double L = 0;
      for (size_t i = 0; i < out.size(); ++i) L += out[i] * p.dout[i];
      return L;
    };
    const size_t n = x.size();
    const size_t stride = s.T <= 8 ? 1 : 37;  // 37 is coprime to 3C: all of q, k, v sampled
    std::vector<double> numeric;
    std::vector<size_t> idx;
    for (size_t i = 0; i < n; i += stride) {
      const double h = 1e-4, x0 = x[i];
      x[i] = x0 + h;
      const double lp = loss(x);
      x[i] = x0 - h;
      const double lm = loss(x);
      x[i] = x0;
      numeric.push_back((lp - lm) / (2 * h));
      idx.push_back(i);
    }
    for (AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kFlash}) {
      Result r = ForwardBackward(*this, p, kind);
      std::vector<float> analytic;
      for (size_t i : idx) analytic.push_back(r.dqkv[i]);
      ExpectClose(analytic, numeric, BwdTol(s), BwdTol(s),
                  std::string(kind == AttentionKind::kNaive ? "naive " : "flash ") +
                      "dqkv vs finite differences " + Name(s));
    }
  }
}

// Changing token t0's q, k and v must leave every output (and lse) of tokens
// before t0 bitwise unchanged, in both variants.
TEST_P(AttentionTest, IsCausal) {
  const Shape s{2, 100, 2, 16, 1.0f};
  Problem p = MakeProblem(s, 41);
  for (int64_t t0 : {1, 50, 64, 99}) {
    Problem q = p;
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t c = 0; c < 3 * s.C(); ++c) q.qkv[(b * s.T + t0) * 3 * s.C() + c] += 3.0f;
    }
    for (AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kFlash}) {
      Result a = ForwardBackward(*this, p, kind), b = ForwardBackward(*this, q, kind);
      for (int64_t bb = 0; bb < s.B; ++bb) {
        const size_t o = bb * s.T * s.C();
        EXPECT_EQ(0, std::memcmp(&a.out[o], &b.out[o], t0 * s.C() * sizeof(float)))
            << "t0=" << t0 << " b=" << bb;
        for (int64_t h = 0; h < s.NH; ++h) {
          const size_t l = (bb * s.NH + h) * s.T;
          EXPECT_EQ(0, std::memcmp(&a.lse[l], &b.lse[l], t0 * sizeof(float)))
              << "t0=" << t0 << " b=" << bb << " h=" << h;
        }
        // and the perturbed token's own output does change
        EXPECT_NE(
            0, std::memcmp(&a.out[o + t0 * s.C()], &b.out[o + t0 * s.C()], s.C() * sizeof(float)));
      }
    }
  }
}

// Same inputs give bitwise-identical outputs twice in a row.
TEST_P(AttentionTest, IsDeterministic) {
  const Shape s{2, 67, 3, 20, 1.0f};
  Problem p = MakeProblem(s, 51);
  for (AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kFlash}) {
    Result a = ForwardBackward(*this, p, kind), b = ForwardBackward(*this, p, kind);
    EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.dqkv.data(), b.dqkv.data(), a.dqkv.size() * sizeof(float)));
  }
}

class CpuOnlyAttentionTest : public testing_backends::CpuBackendTest {};

// The CPU backend's results do not depend on the thread count: all threads
// twice, then one thread.
TEST_F(CpuOnlyAttentionTest, IsTheSameForThreadCounts) {
  const Shape s{2, 130, 4, 32, 1.0f};
  Problem p = MakeProblem(s, 51);
  for (AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kFlash}) {
    Result a = ForwardBackward(*this, p, kind), b = ForwardBackward(*this, p, kind);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    Result c = ForwardBackward(*this, p, kind);
    omp_set_num_threads(threads);
    for (const Result* r : {&b, &c}) {
      EXPECT_EQ(0, std::memcmp(a.out.data(), r->out.data(), a.out.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(a.lse.data(), r->lse.data(), a.lse.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(a.dqkv.data(), r->dqkv.data(), a.dqkv.size() * sizeof(float)));
    }
  }
}

TEST_P(AttentionTest, ShapeErrorsAreInvalidArgument) {
  Backend& be = this->be();
  const int64_t B = 2, T = 5, NH = 2, HS = 4, C = NH * HS;
  auto qkv = Up(std::vector<float>(B * T * 3 * C, 0.5f), {B, T, 3 * C});
  auto out = Out({B, T, C}), lse = Out({B, NH, T}), dqkv = Out({B, T, 3 * C}),
       dout = Up(std::vector<float>(B * T * C, 0.25f), {B, T, C}),
       scratch = Out({B * NH * T * T + 8});
  Tensor qkv_t = qkv.t(), out_t = out.t(), lse_t = lse.t(), dqkv_t = dqkv.t(), dout_t = dout.t();
  Tensor scratch_t = scratch.t({B * NH * T * T});
  const AttentionKind kNaive = AttentionKind::kNaive, kFlash = AttentionKind::kFlash;

  auto expect_invalid = [](const absl::Status& st, const std::string& op, const std::string& what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(std::string(st.message()).find(op), std::string::npos) << st;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st;
  };
  const std::string fwd = "AttentionForward", bwd = "AttentionBackward";

  // The valid calls succeed (flash with an empty scratch).
  EXPECT_TRUE(be.AttentionForward(out_t, lse_t, qkv_t, NH, kNaive, scratch_t).ok());
  EXPECT_TRUE(be.AttentionForward(out_t, lse_t, qkv_t, NH, kFlash, Tensor()).ok());
  EXPECT_TRUE(be.AttentionBackward(dqkv_t, dout_t, qkv_t, out_t, lse_t, NH, kFlash, Tensor()).ok());
  EXPECT_TRUE(
      be.AttentionBackward(dqkv_t, dout_t, qkv_t, out_t, lse_t, NH, kNaive, scratch_t).ok());

  expect_invalid(be.AttentionForward(out_t, lse_t, qkv.t({B, T, 3 * C - 1}), NH, kFlash, Tensor()),
                 fwd, "qkv");
  expect_invalid(be.AttentionForward(out_t, lse_t, qkv.t({B * T, 3 * C}), NH, kFlash, Tensor()),
                 fwd, "qkv");
  expect_invalid(be.AttentionForward(out_t, lse_t, Tensor(), NH, kFlash, Tensor()), fwd, "qkv");
  expect_invalid(be.AttentionForward(out_t, lse_t, qkv_t, 3, kFlash, Tensor()), fwd, "num_heads");
  expect_invalid(be.AttentionForward(out_t, lse_t, qkv_t, 0, kFlash, Tensor()), fwd, "num_heads");
  expect_invalid(be.AttentionForward(Out({B, T, C + 1}).t(), lse_t, qkv_t, NH, kFlash, Tensor()),
                 fwd, "out");
  expect_invalid(be.AttentionForward(out_t, lse.t({B, T, NH}), qkv_t, NH, kFlash, Tensor()), fwd,
                 "lse");
  expect_invalid(be.AttentionForward(out_t, lse_t, qkv_t, NH, kNaive, Tensor()), fwd, "scratch");
  expect_invalid(
      be.AttentionForward(out_t, lse_t, qkv_t, NH, kNaive, scratch.t({B * NH * T * T - 1})), fwd,
      "scratch");
  Tensor int_out = out_t;
  int_out.dtype = DType::kI32;
  expect_invalid(be.AttentionForward(int_out, lse_t, qkv_t, NH, kFlash, Tensor()), fwd, "out");

  expect_invalid(
      be.AttentionBackward(dqkv.t({B, T, C}), dout_t, qkv_t, out_t, lse_t, NH, kFlash, Tensor()),
      bwd, "dqkv");
  expect_invalid(be.AttentionBackward(dqkv_t, dout.t({B, T - 1, C}), qkv_t, out_t, lse_t, NH,
                                      kFlash, Tensor()),
                 bwd, "dout");
  expect_invalid(be.AttentionBackward(dqkv_t, dout_t, qkv_t, Tensor(), lse_t, NH, kFlash, Tensor()),
                 bwd, "out");
  expect_invalid(be.AttentionBackward(dqkv_t, dout_t, qkv_t, out_t, Tensor(), NH, kFlash, Tensor()),
                 bwd, "lse");
  expect_invalid(be.AttentionBackward(dqkv_t, dout_t, qkv_t, out_t, lse_t, 5, kFlash, Tensor()),
                 bwd, "num_heads");
  expect_invalid(
      be.AttentionBackward(dqkv_t, dout_t, qkv_t, out_t, lse_t, NH, kNaive, scratch.t({7})), bwd,
      "scratch");
}

// Throughput of forward + backward on the two benchmark models' attention
// shapes, against a large sgemm in the same process. FLOPs counted are the
// causal model FLOPs: forward 4*B*NH*HS*T(T+1)/2 (two matmuls over the lower
// triangle), backward twice that (the recomputation of S is not counted).
// Printed only: timing is too noisy on shared machines to assert on.
TEST(CpuOnlyAttentionThroughput, Report) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  double sgemm_gflops = 0;
  {
    const int n = 1024;
    std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
    for (int rep = 0; rep < 4; ++rep) {
      const auto t0 = Clock::now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                  0.0f, c.data(), n);
      sgemm_gflops = std::max(sgemm_gflops, 2.0 * n * n * n / seconds(t0) / 1e9);
    }
  }
  std::printf("[ attention ] sgemm 1024^3: %.1f GFLOP/s (%d threads)\n", sgemm_gflops,
              omp_get_max_threads());
  const Shape shapes[] = {{16, 256, 6, 64, 1.0f}, {12, 64, 4, 32, 1.0f}};
  for (const Shape& s : shapes) {
    Problem p = MakeProblem(s, 61);
    std::vector<float> out(s.B * s.T * s.C()), lse(s.B * s.NH * s.T), dqkv(p.qkv.size());
    std::vector<float> scratch(AttentionScratchFloats(AttentionKind::kNaive, s.B, s.T, s.NH));
    Tensor qkv_t = Tensor::F32(p.qkv.data(), {s.B, s.T, 3 * s.C()}, Device::kCpu);
    Tensor out_t = Tensor::F32(out.data(), {s.B, s.T, s.C()}, Device::kCpu);
    Tensor lse_t = Tensor::F32(lse.data(), {s.B, s.NH, s.T}, Device::kCpu);
    Tensor dqkv_t = Tensor::F32(dqkv.data(), {s.B, s.T, 3 * s.C()}, Device::kCpu);
    Tensor dout_t = Tensor::F32(p.dout.data(), {s.B, s.T, s.C()}, Device::kCpu);
    Tensor scratch_t =
        Tensor::F32(scratch.data(), {static_cast<int64_t>(scratch.size())}, Device::kCpu);
    const double fwd_flops = 4.0 * s.B * s.NH * s.HS * s.T * (s.T + 1) / 2;
    for (AttentionKind kind : {AttentionKind::kFlash, AttentionKind::kNaive}) {
      if (kind == AttentionKind::kNaive && s.T > 64) continue;  // ~1 s: too slow for a unit test
      CpuBackend be;
      double best_f = 1e30, best_b = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        auto t0 = Clock::now();
        ASSERT_TRUE(be.AttentionForward(out_t, lse_t, qkv_t, s.NH, kind, scratch_t).ok());
        best_f = std::min(best_f, seconds(t0));
        t0 = Clock::now();
        ASSERT_TRUE(
            be.AttentionBackward(dqkv_t, dout_t, qkv_t, out_t, lse_t, s.NH, kind, scratch_t).ok());
        best_b = std::min(best_b, seconds(t0));
      }
      const double gf = fwd_flops / best_f / 1e9, gb = 2 * fwd_flops / best_b / 1e9;
      const double gt = 3 * fwd_flops / (best_f + best_b) / 1e9;
      std::printf(
          "[ attention ] %s %s: fwd %.2f ms %.1f GFLOP/s, bwd %.2f ms %.1f GFLOP/s, "
          "fwd+bwd %.1f GFLOP/s = %.0f%% of sgemm\n",
          kind == AttentionKind::kFlash ? "flash" : "naive", Name(s).c_str(), best_f * 1e3, gf,
          best_b * 1e3, gb, gt, 100 * gt / sgemm_gflops);
    }
  }
}

}  // namespace
}  // namespace ladder
