// Tests of Backend::AttentionPartForward/Backward (attention by positions,
// context parallelism's ring steps) on every backend of backend_test_util.h
// (cpu, cuda_sim, and cuda where a GPU is usable), fp32 storage (bf16: on the
// CUDA kernels, tests/gpu/attention_part_test.cc). Inputs come from Philox,
// outputs start as NaN, results are read back. What is checked:
//  - Reference: blocks with unsorted, repeated positions and with queries
//    that see no key, against a double-precision reference (forward and
//    backward); the same keys split into two blocks, merged by the forward
//    and accumulated by the backward, give the one-block result.
//  - Causal: positions 0..T-1 of one tensor over itself equal
//    AttentionForward and AttentionBackward (kFlash), the backward added into
//    a zeroed dqkv passed as both gradients.
//  - Ring: C ranks, the sequence in 2C chunks, rank r holding chunks r and
//    2C-1-r (the causal load balance of context parallelism); each rank runs
//    its C ring steps (its own block first, merge false, then the others
//    merged), and each backward step adds dk, dv into the block owner's
//    gradient. The reassembled out, lse and dqkv equal whole-sequence
//    attention. C = 2 and 4, chunks of 7 and 37 tokens (never a multiple of
//    a kernel tile), NH 2-3, HS 16 and 64, B = 2.
//  - Masked: a block where no key is allowed gives out 0 and lse -inf,
//    leaves out and lse bit for bit when merged, and its backward adds
//    nothing (bit for bit).
//  - Shape, dtype and aliasing errors: InvalidArgument naming the tensor.
//  - Determinism: the ring twice gives the same bits (and on the CPU, the
//    same bits with one thread).
//
// Tolerances, the same on every backend, each used as
// |got - want| <= tol * (1 + |want|) (an lse of -inf must be -inf exactly):
// kFwdTol = 1e-5 for out and lse, kBwdTol = 1e-4 for the gradients, both
// as in attention_test.cc and for the same reasons: the sides sum the same
// fp32 terms in different orders (tiles, online rescaling, the log-sum-exp
// merge of C partial results, which adds a few ulp) and use different exp
// implementations, and a gradient sums O(T) terms of both signs.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/core/philox.h"
#include "tests/backend/backend_test_util.h"
#include "tests/backend/reference_ops.h"

namespace ladder {
namespace {

using testing_backends::BackendHarness;
using testing_backends::DeviceArray;

constexpr double kFwdTol = 1e-5;
constexpr double kBwdTol = 1e-4;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> Normal(int64_t n, uint64_t seed, uint64_t stream, float stddev = 1.0f) {
  std::vector<float> x(n);
  FillNormal(x.data(), 0, n, seed, stream, 0.0f, stddev);
  return x;
}

// |got - want| <= tol * (1 + |want|) elementwise, -inf only where want is
// -inf; reports the count and the worst element.
template <typename W>
void ExpectClose(const std::vector<float>& got, const std::vector<W>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = static_cast<double>(want[i]);
    double excess;
    if (std::isinf(w)) {
      excess = g == w ? -1 : 1;
    } else {
      excess = std::fabs(g - w) - tol * (1 + std::fabs(w));
      if (!std::isfinite(g)) excess = 1;
    }
    if (excess > 0) ++bad;
    if (!(excess <= worst_excess)) worst_excess = excess, worst = i;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size()
                    << " elements out of tolerance; worst at " << worst << ": got " << got[worst]
                    << ", want " << want[worst];
}

template <typename T>
void ExpectBitwise(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(T))) << what;
}

// Rows `rows` of x viewed as [G, T, W], as [G, rows.size(), W]; and the inverse.
std::vector<float> Rows(const std::vector<float>& x, int64_t G, int64_t T, int64_t W,
                        const std::vector<int32_t>& rows) {
  const int64_t n = std::ssize(rows);
  std::vector<float> y(G * n * W);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(&x[(g * T + rows[i]) * W], W, &y[(g * n + i) * W]);
    }
  }
  return y;
}
void SetRows(std::vector<float>* x, int64_t G, int64_t T, int64_t W,
             const std::vector<int32_t>& rows, const std::vector<float>& y) {
  const int64_t n = std::ssize(rows);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(&y[(g * n + i) * W], W, &(*x)[(g * T + rows[i]) * W]);
    }
  }
}

std::vector<int32_t> Iota(int64_t n, int32_t first = 0) {
  std::vector<int32_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = first + static_cast<int32_t>(i);
  return v;
}

class AttentionPartTest : public testing_backends::BackendTest {};
LADDER_INSTANTIATE_ON_ALL_BACKENDS(AttentionPartTest);

// ---- against the double reference ----------------------------------------

struct Block {
  std::string name;
  std::vector<int32_t> q_pos, k_pos;
  int64_t split;  // the keys [0, split) and [split, Tk) as two merged blocks
};

// Positions a ring never produces, to pin down the definition: unsorted and
// repeated (random in [0, 90)); queries that see no key (q 0..39 against
// keys from 10: the first ten rows, and for the split, every row of a
// query tile against the second block's first keys); and a long block
// (several tiles of every kernel) with its keys split off-tile.
std::vector<Block> Blocks() {
  PhiloxStream rng(20240607, 7);
  std::vector<int32_t> q(45), k(70);
  for (int32_t& p : q) p = static_cast<int32_t>(rng.NextU32() % 90);
  for (int32_t& p : k) p = static_cast<int32_t>(rng.NextU32() % 90);
  return {
      {"random", q, k, 33},
      {"late keys", Iota(40), Iota(50, 10), 21},
      {"long", Iota(150, 30), Iota(170), 70},
  };
}

TEST_P(AttentionPartTest, MatchesReference) {
  const int64_t B = 2;
  uint64_t seed = 100;
  for (const Block& blk : Blocks()) {
    for (const auto& [NH, HS] : {std::pair<int64_t, int64_t>{2, 16}, {3, 24}}) {
      const int64_t C = NH * HS, Tq = std::ssize(blk.q_pos), Tk = std::ssize(blk.k_pos);
      const std::string what = absl::StrCat(blk.name, " NH=", NH, " HS=", HS);
      const std::vector<float> q_qkv = Normal(B * Tq * 3 * C, seed, 1),
                               kv_qkv = Normal(B * Tk * 3 * C, seed, 2),
                               dout = Normal(B * Tq * C, seed, 3);
      ++seed;
      ref::Vec ref_out, ref_lse, ref_dq, ref_dkv;
      ref::AttentionByPositions(ref::ToDouble(q_qkv), ref::ToDouble(kv_qkv), blk.q_pos, blk.k_pos,
                                B, NH, HS, &ref_out, &ref_lse);
      ref::AttentionByPositionsBackward(ref::ToDouble(q_qkv), ref::ToDouble(kv_qkv), blk.q_pos,
                                        blk.k_pos, ref_out, ref_lse, ref::ToDouble(dout), B, NH, HS,
                                        &ref_dq, &ref_dkv);

      auto q = Up(q_qkv, {B, Tq, 3 * C}), kv = Up(kv_qkv, {B, Tk, 3 * C});
      auto qp = Up(blk.q_pos, {Tq}), kp = Up(blk.k_pos, {Tk});
      auto go = Up(dout, {B, Tq, C});
      auto out = Out({B, Tq, C}), lse = Out({B, NH, Tq});
      // One block.
      ASSERT_TRUE(be().AttentionPartForward(out.t(), lse.t(), q.t(), kv.t(), qp.t(), kp.t(),
                                            static_cast<int>(NH), false)
                      .ok());
      ExpectClose(out.Get(), ref_out, kFwdTol, "out " + what);
      ExpectClose(lse.Get(), ref_lse, kFwdTol, "lse " + what);
      auto dq = Up(std::vector<float>(B * Tq * 3 * C, 0.0f), {B, Tq, 3 * C});
      auto dkv = Up(std::vector<float>(B * Tk * 3 * C, 0.0f), {B, Tk, 3 * C});
      ASSERT_TRUE(be().AttentionPartBackward(dq.t(), dkv.t(), go.t(), q.t(), kv.t(), out.t(),
                                             lse.t(), qp.t(), kp.t(), static_cast<int>(NH))
                      .ok());
      ExpectClose(dq.Get(), ref_dq, kBwdTol, "dq_qkv " + what);
      ExpectClose(dkv.Get(), ref_dkv, kBwdTol, "dkv_qkv " + what);

      // The keys in two blocks: merged forward, backward added per block.
      const std::vector<int32_t> first = Iota(blk.split), second = Iota(Tk - blk.split, blk.split);
      const std::vector<int32_t> kp1(blk.k_pos.begin(), blk.k_pos.begin() + blk.split),
          kp2(blk.k_pos.begin() + blk.split, blk.k_pos.end());
      auto kv1 = Up(Rows(kv_qkv, B, Tk, 3 * C, first), {B, blk.split, 3 * C});
      auto kv2 = Up(Rows(kv_qkv, B, Tk, 3 * C, second), {B, Tk - blk.split, 3 * C});
      auto kp1_d = Up(kp1, {blk.split}), kp2_d = Up(kp2, {Tk - blk.split});
      auto out2 = Out({B, Tq, C}), lse2 = Out({B, NH, Tq});
      ASSERT_TRUE(be().AttentionPartForward(out2.t(), lse2.t(), q.t(), kv1.t(), qp.t(), kp1_d.t(),
                                            static_cast<int>(NH), false)
                      .ok());
      ASSERT_TRUE(be().AttentionPartForward(out2.t(), lse2.t(), q.t(), kv2.t(), qp.t(), kp2_d.t(),
                                            static_cast<int>(NH), true)
                      .ok());
      ExpectClose(out2.Get(), ref_out, kFwdTol, "merged out " + what);
      ExpectClose(lse2.Get(), ref_lse, kFwdTol, "merged lse " + what);
      auto dq2 = Up(std::vector<float>(B * Tq * 3 * C, 0.0f), {B, Tq, 3 * C});
      auto dkv1 = Up(std::vector<float>(B * blk.split * 3 * C, 0.0f), {B, blk.split, 3 * C});
      auto dkv2 =
          Up(std::vector<float>(B * (Tk - blk.split) * 3 * C, 0.0f), {B, Tk - blk.split, 3 * C});
      ASSERT_TRUE(be().AttentionPartBackward(dq2.t(), dkv1.t(), go.t(), q.t(), kv1.t(), out2.t(),
                                             lse2.t(), qp.t(), kp1_d.t(), static_cast<int>(NH))
                      .ok());
      ASSERT_TRUE(be().AttentionPartBackward(dq2.t(), dkv2.t(), go.t(), q.t(), kv2.t(), out2.t(),
                                             lse2.t(), qp.t(), kp2_d.t(), static_cast<int>(NH))
                      .ok());
      std::vector<float> dkv_both(B * Tk * 3 * C);
      SetRows(&dkv_both, B, Tk, 3 * C, first, dkv1.Get());
      SetRows(&dkv_both, B, Tk, 3 * C, second, dkv2.Get());
      ExpectClose(dq2.Get(), ref_dq, kBwdTol, "two-block dq_qkv " + what);
      ExpectClose(dkv_both, ref_dkv, kBwdTol, "two-block dkv_qkv " + what);
    }
  }
}

// ---- positions 0..T-1 are causal attention ------------------------------------

TEST_P(AttentionPartTest, CausalPositionsMatchAttention) {
  struct Shape {
    int64_t B, T, NH, HS;
    float stddev;
  };
  // One key; under one tile; whole tiles of both kernel families (32, 64);
  // a tail; a head size not a multiple of 8; peaky scores.
  const Shape shapes[] = {{2, 1, 1, 8, 1.0f},    {2, 7, 2, 16, 1.0f},  {2, 64, 2, 32, 1.0f},
                          {2, 100, 3, 64, 1.0f}, {1, 70, 3, 12, 1.0f}, {2, 130, 2, 16, 3.0f}};
  uint64_t seed = 200;
  for (const Shape& s : shapes) {
    const int64_t B = s.B, T = s.T, NH = s.NH, C = s.NH * s.HS;
    const std::string what = absl::StrCat("B=", B, " T=", T, " NH=", NH, " HS=", s.HS);
    const double scale2 = std::max(1.0f, s.stddev * s.stddev);  // as attention_test.cc
    auto qkv = Up(Normal(B * T * 3 * C, seed, 1, s.stddev), {B, T, 3 * C});
    auto dout = Up(Normal(B * T * C, seed, 2), {B, T, C});
    ++seed;
    auto pos = Up(Iota(T), {T});
    auto out = Out({B, T, C}), lse = Out({B, NH, T}), dqkv = Out({B, T, 3 * C});
    const int nh = static_cast<int>(NH);
    ASSERT_TRUE(
        be().AttentionForward(out.t(), lse.t(), qkv.t(), nh, AttentionKind::kFlash, Tensor()).ok());
    ASSERT_TRUE(be().AttentionBackward(dqkv.t(), dout.t(), qkv.t(), out.t(), lse.t(), nh,
                                       AttentionKind::kFlash, Tensor())
                    .ok());
    auto part_out = Out({B, T, C}), part_lse = Out({B, NH, T});
    ASSERT_TRUE(be().AttentionPartForward(part_out.t(), part_lse.t(), qkv.t(), qkv.t(), pos.t(),
                                          pos.t(), nh, false)
                    .ok());
    ExpectClose(part_out.Get(), out.Get(), kFwdTol * scale2, "out " + what);
    ExpectClose(part_lse.Get(), lse.Get(), kFwdTol * scale2, "lse " + what);
    auto part_dqkv = Up(std::vector<float>(B * T * 3 * C, 0.0f), {B, T, 3 * C});
    ASSERT_TRUE(be().AttentionPartBackward(part_dqkv.t(), part_dqkv.t(), dout.t(), qkv.t(), qkv.t(),
                                           out.t(), lse.t(), pos.t(), pos.t(), nh)
                    .ok());
    ExpectClose(part_dqkv.Get(), dqkv.Get(), kBwdTol * scale2, "dqkv " + what);
  }
}

// ---- the ring ----------------------------------------------------------------------

struct RingShape {
  int64_t ranks, chunk, NH, HS;
  int64_t B = 2;
  int64_t T() const { return 2 * ranks * chunk; }
  int64_t C() const { return NH * HS; }
};

std::string Name(const RingShape& s) {
  return absl::StrCat("ranks=", s.ranks, " chunk=", s.chunk, " NH=", s.NH, " HS=", s.HS);
}

struct Whole {
  std::vector<float> out, lse, dqkv;  // [B,T,C], [B,NH,T], [B,T,3C]
};

// Context parallelism's attention on one device: rank r's tokens are chunks
// r and 2R-1-r of the sequence (their positions say so); ring step k brings
// rank r the block of rank (r - k) mod R. Returns the ranks' results
// reassembled in sequence order.
Whole RunRing(BackendHarness& h, const RingShape& s, const std::vector<float>& qkv,
              const std::vector<float>& dout) {
  const int64_t R = s.ranks, B = s.B, T = s.T(), C = s.C(), NH = s.NH, n = 2 * s.chunk;
  const int nh = static_cast<int>(NH);
  std::vector<std::vector<int32_t>> tokens(R);
  std::vector<DeviceArray<float>> q(R), go(R), out(R), lse(R), dq(R);
  std::vector<DeviceArray<int32_t>> pos(R);
  for (int64_t r = 0; r < R; ++r) {
    tokens[r] = Iota(s.chunk, static_cast<int32_t>(r * s.chunk));
    const std::vector<int32_t> late =
        Iota(s.chunk, static_cast<int32_t>((2 * R - 1 - r) * s.chunk));
    tokens[r].insert(tokens[r].end(), late.begin(), late.end());
    q[r] = h.Up(Rows(qkv, B, T, 3 * C, tokens[r]), {B, n, 3 * C});
    go[r] = h.Up(Rows(dout, B, T, C, tokens[r]), {B, n, C});
    pos[r] = h.Up(tokens[r], {n});  // a token's index is its position
    out[r] = h.Out({B, n, C});
    lse[r] = h.Out({B, NH, n});
    dq[r] = h.Up(std::vector<float>(B * n * 3 * C, 0.0f), {B, n, 3 * C});
  }
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t k = 0; k < R; ++k) {
      const int64_t src = (r - k + R) % R;
      EXPECT_TRUE(h.be()
                      .AttentionPartForward(out[r].t(), lse[r].t(), q[r].t(), q[src].t(),
                                            pos[r].t(), pos[src].t(), nh, /*merge=*/k > 0)
                      .ok());
    }
  }
  // Each step's dk, dv go straight into the owner's gradient (in a real ring
  // they travel back with the block); step 0's block is the rank's own, so
  // both gradients are one tensor.
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t k = 0; k < R; ++k) {
      const int64_t src = (r - k + R) % R;
      EXPECT_TRUE(h.be()
                      .AttentionPartBackward(dq[r].t(), dq[src].t(), go[r].t(), q[r].t(),
                                             q[src].t(), out[r].t(), lse[r].t(), pos[r].t(),
                                             pos[src].t(), nh)
                      .ok());
    }
  }
  Whole w{std::vector<float>(B * T * C), std::vector<float>(B * NH * T),
          std::vector<float>(B * T * 3 * C)};
  for (int64_t r = 0; r < R; ++r) {
    SetRows(&w.out, B, T, C, tokens[r], out[r].Get());
    SetRows(&w.lse, B * NH, T, 1, tokens[r], lse[r].Get());
    SetRows(&w.dqkv, B, T, 3 * C, tokens[r], dq[r].Get());
  }
  return w;
}

// AttentionForward/Backward (kFlash) over the whole sequence.
Whole RunWhole(BackendHarness& h, const RingShape& s, const std::vector<float>& qkv,
               const std::vector<float>& dout) {
  const int64_t B = s.B, T = s.T(), C = s.C(), NH = s.NH;
  auto q = h.Up(qkv, {B, T, 3 * C}), go = h.Up(dout, {B, T, C});
  auto out = h.Out({B, T, C}), lse = h.Out({B, NH, T}), dqkv = h.Out({B, T, 3 * C});
  const int nh = static_cast<int>(NH);
  EXPECT_TRUE(
      h.be().AttentionForward(out.t(), lse.t(), q.t(), nh, AttentionKind::kFlash, Tensor()).ok());
  EXPECT_TRUE(h.be()
                  .AttentionBackward(dqkv.t(), go.t(), q.t(), out.t(), lse.t(), nh,
                                     AttentionKind::kFlash, Tensor())
                  .ok());
  return {out.Get(), lse.Get(), dqkv.Get()};
}

const RingShape kRings[] = {{2, 7, 2, 16}, {2, 37, 3, 64}, {4, 7, 3, 64}, {4, 37, 2, 16}};

TEST_P(AttentionPartTest, RingEqualsWholeSequence) {
  uint64_t seed = 300;
  for (const RingShape& s : kRings) {
    const std::vector<float> qkv = Normal(s.B * s.T() * 3 * s.C(), seed, 1),
                             dout = Normal(s.B * s.T() * s.C(), seed, 2);
    ++seed;
    const Whole ring = RunRing(*this, s, qkv, dout), whole = RunWhole(*this, s, qkv, dout);
    ExpectClose(ring.out, whole.out, kFwdTol, "out " + Name(s));
    ExpectClose(ring.lse, whole.lse, kFwdTol, "lse " + Name(s));
    ExpectClose(ring.dqkv, whole.dqkv, kBwdTol, "dqkv " + Name(s));
  }
}

TEST_P(AttentionPartTest, IsDeterministic) {
  const RingShape s{4, 37, 3, 16};
  const std::vector<float> qkv = Normal(s.B * s.T() * 3 * s.C(), 400, 1),
                           dout = Normal(s.B * s.T() * s.C(), 400, 2);
  const Whole a = RunRing(*this, s, qkv, dout), b = RunRing(*this, s, qkv, dout);
  ExpectBitwise(a.out, b.out, "out");
  ExpectBitwise(a.lse, b.lse, "lse");
  ExpectBitwise(a.dqkv, b.dqkv, "dqkv");
}

class CpuOnlyAttentionPartTest : public testing_backends::CpuBackendTest {};

// The CPU backend's results do not depend on the thread count.
TEST_F(CpuOnlyAttentionPartTest, IsTheSameForThreadCounts) {
  const RingShape s{2, 37, 3, 16};
  const std::vector<float> qkv = Normal(s.B * s.T() * 3 * s.C(), 401, 1),
                           dout = Normal(s.B * s.T() * s.C(), 401, 2);
  const Whole a = RunRing(*this, s, qkv, dout);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Whole b = RunRing(*this, s, qkv, dout);
  omp_set_num_threads(threads);
  ExpectBitwise(a.out, b.out, "out");
  ExpectBitwise(a.lse, b.lse, "lse");
  ExpectBitwise(a.dqkv, b.dqkv, "dqkv");
}

// ---- a block with no allowed key ---------------------------------------------------

TEST_P(AttentionPartTest, MaskedBlockChangesNothing) {
  const int64_t B = 2, Tq = 40, Tk = 50, NH = 2, HS = 16, C = NH * HS;
  const int nh = static_cast<int>(NH);
  auto q = Up(Normal(B * Tq * 3 * C, 500, 1), {B, Tq, 3 * C});
  auto kv = Up(Normal(B * Tk * 3 * C, 500, 2), {B, Tk, 3 * C});
  auto qp = Up(Iota(Tq), {Tq}), kp = Up(Iota(Tk, 100), {Tk});  // every key later than every query

  auto out = Out({B, Tq, C}), lse = Out({B, NH, Tq});
  ASSERT_TRUE(
      be().AttentionPartForward(out.t(), lse.t(), q.t(), kv.t(), qp.t(), kp.t(), nh, false).ok());
  ExpectBitwise(out.Get(), std::vector<float>(B * Tq * C, 0.0f), "merge=false out");
  ExpectBitwise(lse.Get(), std::vector<float>(B * NH * Tq, kNegInf), "merge=false lse");

  const std::vector<float> out1 = Normal(B * Tq * C, 500, 3), lse1 = Normal(B * NH * Tq, 500, 4);
  out.Set(out1);
  lse.Set(lse1);
  ASSERT_TRUE(
      be().AttentionPartForward(out.t(), lse.t(), q.t(), kv.t(), qp.t(), kp.t(), nh, true).ok());
  ExpectBitwise(out.Get(), out1, "merge=true out");
  ExpectBitwise(lse.Get(), lse1, "merge=true lse");

  const std::vector<float> dq0 = Normal(B * Tq * 3 * C, 500, 5),
                           dkv0 = Normal(B * Tk * 3 * C, 500, 6);
  auto dq = Up(dq0, {B, Tq, 3 * C}), dkv = Up(dkv0, {B, Tk, 3 * C});
  auto dout = Up(Normal(B * Tq * C, 500, 7), {B, Tq, C});
  ASSERT_TRUE(be().AttentionPartBackward(dq.t(), dkv.t(), dout.t(), q.t(), kv.t(), out.t(), lse.t(),
                                         qp.t(), kp.t(), nh)
                  .ok());
  ExpectBitwise(dq.Get(), dq0, "dq_qkv");
  ExpectBitwise(dkv.Get(), dkv0, "dkv_qkv");
}

// ---- argument errors ---------------------------------------------------------------

TEST_P(AttentionPartTest, BadArgumentsAreInvalidArgument) {
  Backend& b = be();
  const int64_t B = 2, Tq = 5, Tk = 7, NH = 2, HS = 4, C = NH * HS;
  auto q = Up(std::vector<float>(B * Tq * 3 * C, 0.5f), {B, Tq, 3 * C});
  auto kv = Up(std::vector<float>(B * Tk * 3 * C, 0.25f), {B, Tk, 3 * C});
  auto qp = Up(Iota(Tq, 10), {Tq}), kp = Up(Iota(Tk), {Tk});
  auto out = Out({B, Tq, C}), lse = Out({B, NH, Tq}), dout = Out({B, Tq, C});
  auto dq = Up(std::vector<float>(B * Tq * 3 * C, 0.0f), {B, Tq, 3 * C});
  auto dkv = Up(std::vector<float>(B * Tk * 3 * C, 0.0f), {B, Tk, 3 * C});
  const Tensor q_t = q.t(), kv_t = kv.t(), qp_t = qp.t(), kp_t = kp.t(), out_t = out.t(),
               lse_t = lse.t(), dq_t = dq.t(), dkv_t = dkv.t();
  ASSERT_TRUE(b.AttentionPartForward(out_t, lse_t, q_t, kv_t, qp_t, kp_t, 2, false).ok());
  const Tensor dout_t = out_t;  // any [B,Tq,C]
  ASSERT_TRUE(
      b.AttentionPartBackward(dq_t, dkv_t, dout_t, q_t, kv_t, out_t, lse_t, qp_t, kp_t, 2).ok());

  auto expect_invalid = [](const absl::Status& st, const std::string& op, const std::string& what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(std::string(st.message()).find(op), std::string::npos) << st;
    EXPECT_NE(std::string(st.message()).find(what), std::string::npos) << st;
  };
  auto fwd = [&](Tensor o, Tensor l, Tensor qq, Tensor kk, Tensor qpp, Tensor kpp, int nh) {
    return b.AttentionPartForward(o, l, qq, kk, qpp, kpp, nh, true);
  };
  auto bwd = [&](Tensor dqq, Tensor dkk, Tensor go, Tensor qq, Tensor kk, Tensor o, Tensor l,
                 Tensor qpp, Tensor kpp, int nh) {
    return b.AttentionPartBackward(dqq, dkk, go, qq, kk, o, l, qpp, kpp, nh);
  };
  const std::string F = "AttentionPartForward", Bw = "AttentionPartBackward";
  Tensor f32_pos = qp_t;
  f32_pos.dtype = DType::kF32;

  expect_invalid(fwd(out_t, lse_t, q.t({B * Tq, 3 * C}), kv_t, qp_t, kp_t, 2), F, "q_qkv");
  expect_invalid(fwd(out_t, lse_t, q_t, kv.t({B, Tk, 3 * C - 6}), qp_t, kp_t, 2), F, "kv_qkv");
  expect_invalid(fwd(out_t, lse_t, q_t, kv.t({1, Tk, 3 * C}), qp_t, kp_t, 2), F, "kv_qkv");
  expect_invalid(fwd(out_t, lse_t, q_t, Tensor(), qp_t, kp_t, 2), F, "kv_qkv");
  expect_invalid(fwd(out_t, lse_t, q_t, kv_t, qp.t({Tq - 1}), kp_t, 2), F, "q_pos");
  expect_invalid(fwd(out_t, lse_t, q_t, kv_t, f32_pos, kp_t, 2), F, "q_pos");
  expect_invalid(fwd(out_t, lse_t, q_t, kv_t, qp_t, qp_t, 2), F, "k_pos");
  expect_invalid(fwd(out_t, lse_t, q_t, kv_t, qp_t, Tensor(), 2), F, "k_pos");
  expect_invalid(fwd(out_t, lse_t, q_t, kv_t, qp_t, kp_t, 3), F, "num_heads");
  expect_invalid(fwd(out.t({B, Tq, C - 1}), lse_t, q_t, kv_t, qp_t, kp_t, 2), F, "out");
  expect_invalid(fwd(out_t, lse.t({B, Tq, NH}), q_t, kv_t, qp_t, kp_t, 2), F, "lse");
  expect_invalid(fwd(q.t({B, Tq, C}), lse_t, q_t, kv_t, qp_t, kp_t, 2), F, "overlaps");

  expect_invalid(bwd(dq.t({B, Tq, C}), dkv_t, dout_t, q_t, kv_t, out_t, lse_t, qp_t, kp_t, 2), Bw,
                 "dq_qkv");
  expect_invalid(bwd(dq_t, dq_t, dout_t, q_t, kv_t, out_t, lse_t, qp_t, kp_t, 2), Bw, "dkv_qkv");
  expect_invalid(bwd(dq_t, dkv_t, dout.t({B, Tq - 1, C}), q_t, kv_t, out_t, lse_t, qp_t, kp_t, 2),
                 Bw, "dout");
  expect_invalid(bwd(dq_t, dkv_t, dout_t, q_t, kv_t, Tensor(), lse_t, qp_t, kp_t, 2), Bw, "out");
  expect_invalid(bwd(dq_t, dkv_t, dout_t, q_t, kv_t, out_t, lse.t({B, NH, Tq - 1}), qp_t, kp_t, 2),
                 Bw, "lse");
  expect_invalid(bwd(dq_t, dkv_t, dout_t, q_t, kv_t, out_t, lse_t, qp_t, kp.t({Tk - 1}), 2), Bw,
                 "k_pos");
  // dq_qkv and dkv_qkv overlapping without being one tensor.
  auto big = Up(std::vector<float>(B * Tk * 3 * C + 8, 0.0f), {B * Tk * 3 * C + 8});
  expect_invalid(bwd(big.t({B, Tq, 3 * C}), big.t().Slice(8, {B, Tk, 3 * C}), dout_t, q_t, kv_t,
                     out_t, lse_t, qp_t, kp_t, 2),
                 Bw, "overlap");
}

}  // namespace
}  // namespace ladder
