// Attention over the paged KV cache equals the training attention, on every
// backend of backend_test_util.h (cpu, cuda_sim, and cuda where a GPU is
// usable): the same random q, k and v, written into randomly placed cache
// blocks, give the same outputs as the backend's AttentionForward over the
// whole sequences (within 2e-6 absolute: both are fp32 softmax-weighted means
// of the same O(1) values, summed in different orders) and as the double
// reference ref::CausalAttention (within 1e-5, attention_test's forward
// tolerance), for every token at once (a prefill) and for last tokens alone
// (a decode). Shapes: T = 37 and 19 (not multiples of the 16-row block),
// HS = 8 and 20 (a scalar tail), and T = 300 (three splits of 128
// positions, merged by log-sum-exp). Outputs start as NaN.
//
// Splits are fixed by position: a token's output is the same bits whether
// it is attended in a prefill, in a decode batch, or alone (every backend),
// and whatever the CPU's thread count.
//
// The int8 cache, on every backend (and, CPU-only, at every ISA level this
// CPU supports, cpu_isa.h):
//  - equals fp32 attention over the cache's own dequantized values (q *
//    scale) within 1e-5 x max|v| per element: only float rounding differs
//    (the outputs are weighted means of v, so max|v| is their scale);
//  - is within the quantization bound of fp32 attention over the exact
//    values: each k and v value moves by at most its row's scale / 2, so a
//    score moves by at most ds = sum_d |q_d| max(k scale) / 2 / sqrt(HS), the
//    softmax weights by at most e^(2 ds) - 1 in sum, and an output by at most
//    max(v scale) / 2 + (e^(2 ds) - 1) max|v|.
// Missing or misshapen scales are refused on every backend.
//
// A prefill chunk of 600 tokens of width 256 (large enough that the CPU
// splits it over its threads) written into a shuffled set of rows: every
// written row holds the token's k and v bit for bit (fp32), or their
// QuantizeSymmetric values and scales bit for bit (int8); every other row
// keeps its poison.
//
// bf16 activations (cuda and cuda-sim; InvalidArgument on the CPU): a bf16
// qkv writes, bit for bit, the cache its widened fp32 copy writes (fp32 and
// int8 caches), and the bf16 output is the fp32 call's output on those
// widened values rounded to bf16, bit for bit (the kernels widen on load
// and round once on store), for a prefill of T = 150 (two splits, so the
// combine writes the output) and a decode of the last tokens.
//
// CPU-only: bad indices (a position past the block table, a block outside
// the cache, a slot outside it) are InvalidArgument on the CPU backend; they
// live on the device, so the CUDA kernels cannot refuse them and instead
// skip the slot or write NaN (src/backend/cuda/paged_attention.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/quantize.h"
#include "src/core/bf16.h"
#include "tests/backend/backend_test_util.h"
#include "tests/backend/cpu_test_inputs.h"
#include "tests/backend/reference_ops.h"

namespace ladder {
namespace {

using Floats = std::vector<float>;
using Ints = std::vector<int32_t>;
constexpr int kBlock = 16;

class PagedAttentionTest : public testing_backends::BackendTest {};
LADDER_INSTANTIATE_ON_ALL_BACKENDS(PagedAttentionTest);
class CpuOnlyPagedAttentionTest : public testing_backends::CpuBackendTest {};

// B sequences of T tokens, each sequence's blocks at random places of a
// larger cache (5 spare blocks).
struct Layout {
  int B, T, max_blocks, blocks, N;
  Ints tables, seq, pos, slots;
  Layout(int b, int t, std::mt19937& rng)
      : B(b), T(t), max_blocks((t + kBlock - 1) / kBlock), blocks(b * max_blocks + 5), N(b * t) {
    Ints order(blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    tables.assign(order.begin(), order.begin() + B * max_blocks);
    seq.resize(N);
    pos.resize(N);
    slots.resize(N);
    for (int s = 0; s < B; ++s) {
      for (int i = 0; i < T; ++i) {
        seq[s * T + i] = s;
        pos[s * T + i] = i;
        slots[s * T + i] = tables[s * max_blocks + i / kBlock] * kBlock + i % kBlock;
      }
    }
  }
};

// A decode step of B sequences of T tokens ([B, T, 3C] qkv): each one's last
// token's qkv row, sequence and position.
struct LastTokens {
  Floats qkv;
  Ints seq, pos;
  LastTokens(const Floats& all, int B, int T, int C) : qkv(B * 3 * C), seq(B), pos(B) {
    for (int b = 0; b < B; ++b) {
      std::copy_n(all.begin() + (b * T + T - 1) * 3 * C, 3 * C, qkv.begin() + b * 3 * C);
      seq[b] = b;
      pos[b] = T - 1;
    }
  }
};

TEST_P(PagedAttentionTest, EqualsFullAttention) {
  struct Shape {
    int B, T, NH, HS;
  };
  for (Shape sh : {Shape{3, 37, 4, 8}, Shape{2, 19, 3, 20}, Shape{2, 300, 2, 8}}) {
    const int B = sh.B, T = sh.T, NH = sh.NH, HS = sh.HS, C = NH * HS;
    SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " NH=" << NH << " HS=" << HS);
    std::mt19937 rng(7 + T);
    const Floats qkv = testing_inputs::Uniform(B * T * 3 * C, 8 + T);
    auto dqkv = Up(qkv, {B, T, 3 * C});
    auto want_d = Out({B, T, C}), lse = Out({B, NH, T});
    ASSERT_TRUE(
        be().AttentionForward(want_d.t(), lse.t(), dqkv.t(), NH, AttentionKind::kFlash, Tensor())
            .ok());
    const Floats want = want_d.Get();
    ref::Vec ref_out, ref_lse;
    ref::CausalAttention(ref::ToDouble(qkv), B, T, NH, HS, &ref_out, &ref_lse);

    Layout l(B, T, rng);
    const int N = l.N, S = l.blocks * kBlock;
    auto K = Out({S, C}), V = Out({S, C});  // NaN: rows never written must never be read
    auto tab = Up(l.tables, {B, l.max_blocks});
    const PagedKv kv{K.t(), V.t(), Tensor(), Tensor()};
    ASSERT_TRUE(be().KvCacheWrite(kv, dqkv.t({N, 3 * C}), Up(l.slots, {N}).t(), NH).ok());
    auto got_d = Out({N, C});
    ASSERT_TRUE(be().PagedAttentionForward(got_d.t(), dqkv.t({N, 3 * C}), kv, tab.t(),
                                           Up(l.seq, {N}).t(), Up(l.pos, {N}).t(), NH)
                    .ok());
    const Floats got = got_d.Get();
    for (int i = 0; i < N * C; ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-6f) << i;
      ASSERT_NEAR(got[i], ref_out[i], 1e-5) << i;
    }

    // Decode: only each sequence's last token asks.
    const LastTokens last(qkv, B, T, C);
    auto one_d = Out({B, C});
    ASSERT_TRUE(be().PagedAttentionForward(one_d.t(), Up(last.qkv, {B, 3 * C}).t(), kv, tab.t(),
                                           Up(last.seq, {B}).t(), Up(last.pos, {B}).t(), NH)
                    .ok());
    const Floats one = one_d.Get();
    for (int b = 0; b < B; ++b) {
      for (int c = 0; c < C; ++c) {
        ASSERT_NEAR(one[b * C + c], want[(b * T + T - 1) * C + c], 2e-6f) << b << "," << c;
      }
    }
  }
}

// B sequences of T tokens in a fresh fp32 cache; Attend(tokens) runs the
// listed tokens (indices into the B x T) as one call and returns their rows.
struct FilledCache {
  static constexpr int B = 5, T = 300, NH = 3, HS = 16, C = NH * HS;
  testing_backends::BackendHarness& h;
  std::mt19937 rng{41};
  Layout l{B, T, rng};
  Floats qkv = testing_inputs::Uniform(B * T * 3 * C, 42);
  testing_backends::DeviceArray<float> K = h.Out({l.blocks * kBlock, C}),
                                       V = h.Out({l.blocks * kBlock, C});
  PagedKv kv{K.t(), V.t(), Tensor(), Tensor()};

  explicit FilledCache(testing_backends::BackendHarness& harness) : h(harness) {
    EXPECT_TRUE(h.be()
                    .KvCacheWrite(kv, h.Up(qkv, {B * T, 3 * C}).t(), h.Up(l.slots, {B * T}).t(), NH)
                    .ok());
  }
  Floats Attend(const Ints& tokens) {
    const int n = static_cast<int>(tokens.size());
    Floats q(n * 3 * C);
    Ints seq(n), pos(n);
    for (int i = 0; i < n; ++i) {
      std::copy_n(qkv.begin() + tokens[i] * 3 * C, 3 * C, q.begin() + i * 3 * C);
      seq[i] = l.seq[tokens[i]];
      pos[i] = l.pos[tokens[i]];
    }
    auto out = h.Out({n, C});
    EXPECT_TRUE(h.be()
                    .PagedAttentionForward(out.t(), h.Up(q, {n, 3 * C}).t(), kv,
                                           h.Up(l.tables, {B, l.max_blocks}).t(),
                                           h.Up(seq, {n}).t(), h.Up(pos, {n}).t(), NH)
                    .ok());
    return out.Get();
  }
  // Row r of Attend's result `rows`.
  static Floats Row(const Floats& rows, int r) {
    return Floats(rows.begin() + r * C, rows.begin() + (r + 1) * C);
  }
};

TEST_P(PagedAttentionTest, SplitsAreFixedByPosition) {
  FilledCache f(*this);
  constexpr int T = FilledCache::T;
  Ints all(FilledCache::B * T);
  std::iota(all.begin(), all.end(), 0);
  const Floats prefill = f.Attend(all);
  const Ints last = {T - 1, 2 * T - 1, 3 * T - 1, 4 * T - 1, 5 * T - 1};
  const Floats batch = f.Attend(last);
  for (int b = 0; b < FilledCache::B; ++b) {
    SCOPED_TRACE(b);
    EXPECT_EQ(FilledCache::Row(batch, b), FilledCache::Row(prefill, last[b]));
  }
  // Alone, and beside a short sequence's token (one split) in another order.
  EXPECT_EQ(f.Attend({last[2]}), FilledCache::Row(batch, 2));
  const Floats pair = f.Attend({T + 5, last[2]});
  EXPECT_EQ(FilledCache::Row(pair, 1), FilledCache::Row(batch, 2));
  EXPECT_EQ(FilledCache::Row(pair, 0), FilledCache::Row(prefill, T + 5));
}

TEST_F(CpuOnlyPagedAttentionTest, OutputDoesNotDependOnTheThreadCount) {
  FilledCache f(*this);
  constexpr int T = FilledCache::T;
  // 5 decode tokens: a job per token on one thread, a job per (token,
  // split) on two or more (paged_attention.cc).
  const Ints last = {T - 1, 2 * T - 1, 3 * T - 1, 4 * T - 1, 5 * T - 1};
  const Floats threaded = f.Attend(last);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Floats one = f.Attend(last);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, threaded);
}

// Indices on the device: refused by the CPU backend only (header comment).
TEST_F(CpuOnlyPagedAttentionTest, BadIndicesAreInvalidArgument) {
  const int B = 3, T = 37, NH = 4, HS = 8, C = NH * HS;
  std::mt19937 rng(7);
  Layout l(B, T, rng);
  const int N = l.N, S = l.blocks * kBlock;
  auto qkv = Up(testing_inputs::Uniform(N * 3 * C, 9), {N, 3 * C});
  auto K = Out({S, C}), V = Out({S, C}), one = Out({B, C});
  const PagedKv kv{K.t(), V.t(), Tensor(), Tensor()};
  ASSERT_TRUE(be().KvCacheWrite(kv, qkv.t(), Up(l.slots, {N}).t(), NH).ok());
  Ints s_last(B), p_last(B, T - 1);
  std::iota(s_last.begin(), s_last.end(), 0);
  auto attend = [&](const Ints& tables, const Ints& p) {
    return be()
        .PagedAttentionForward(one.t(), qkv.t({B, 3 * C}), kv, Up(tables, {B, l.max_blocks}).t(),
                               Up(s_last, {B}).t(), Up(p, {B}).t(), NH)
        .code();
  };
  ASSERT_EQ(attend(l.tables, p_last), absl::StatusCode::kOk);
  // A position past the table, a block outside the cache, a slot outside it.
  p_last[0] = l.max_blocks * kBlock;
  EXPECT_EQ(attend(l.tables, p_last), absl::StatusCode::kInvalidArgument);
  p_last[0] = T - 1;
  Ints tables = l.tables;
  tables[0] = l.blocks;
  EXPECT_EQ(attend(tables, p_last), absl::StatusCode::kInvalidArgument);
  Ints slots = l.slots;
  slots[0] = S;
  EXPECT_EQ(be().KvCacheWrite(kv, qkv.t(), Up(slots, {N}).t(), NH).code(),
            absl::StatusCode::kInvalidArgument);
}

// The int8 cache against fp32 attention (header comment) for head size HS
// and sequences of T tokens, on h's backend; for each of `levels` (CPU ISA levels) in turn, or once
// as the backend is if `levels` is empty.
void CheckInt8Cache(testing_backends::BackendHarness& h, int HS, int T,
                    const std::vector<CpuIsa>& levels) {
  SCOPED_TRACE(::testing::Message() << "HS=" << HS << " T=" << T);
  const int B = 2, NH = 3, C = NH * HS;
  const int max_blocks = (T + kBlock - 1) / kBlock, S = B * max_blocks * kBlock, N = B * T;
  const Floats qkv = testing_inputs::Uniform(N * 3 * C, 11 + HS);
  // Sequence b owns blocks b * max_blocks + i, reversed so rows are not in order.
  Ints tables(B * max_blocks), seq(N), pos(N), slots(N);
  for (int i = 0; i < B * max_blocks; ++i) tables[i] = B * max_blocks - 1 - i;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      seq[b * T + t] = b;
      pos[b * T + t] = t;
      slots[b * T + t] = tables[b * max_blocks + t / kBlock] * kBlock + t % kBlock;
    }
  }
  Backend& be = h.be();
  auto QKV = h.Up(qkv, {N, 3 * C});
  auto tab = h.Up(tables, {B, max_blocks}), SEQ = h.Up(seq, {N}), POS = h.Up(pos, {N}),
       SLOTS = h.Up(slots, {N});
  auto kf = h.Out({S, C}), vf = h.Out({S, C});
  const PagedKv fp32{kf.t(), vf.t(), Tensor(), Tensor()};
  // Rows past a sequence's last token are neither written nor read: they keep
  // the poison (and std::max below ignores the NaN).
  auto k8 = h.Out<int8_t>({S, C}), v8 = h.Out<int8_t>({S, C});
  auto ks = h.Out({S, NH}), vs = h.Out({S, NH});
  const PagedKv int8{k8.t(), v8.t(), ks.t(), vs.t()};
  ASSERT_TRUE(be.KvCacheWrite(fp32, QKV.t(), SLOTS.t(), NH).ok());
  ASSERT_TRUE(be.KvCacheWrite(int8, QKV.t(), SLOTS.t(), NH).ok());

  // An fp32 cache holding the int8 cache's values, dequantized.
  const std::vector<int8_t> hk8 = k8.Get(), hv8 = v8.Get();
  const Floats hks = ks.Get(), hvs = vs.Get(), hvf = vf.Get();
  Floats kd(S * C), vd(S * C);
  for (int r = 0; r < S; ++r) {
    for (int c = 0; c < C; ++c) {
      kd[r * C + c] = hk8[r * C + c] * hks[r * NH + c / HS];
      vd[r * C + c] = hv8[r * C + c] * hvs[r * NH + c / HS];
    }
  }
  auto kdd = h.Up(kd, {S, C}), vdd = h.Up(vd, {S, C});
  const PagedKv deq{kdd.t(), vdd.t(), Tensor(), Tensor()};
  auto exact_d = h.Out({N, C}), deq_d = h.Out({N, C});
  ASSERT_TRUE(
      be.PagedAttentionForward(exact_d.t(), QKV.t(), fp32, tab.t(), SEQ.t(), POS.t(), NH).ok());
  ASSERT_TRUE(
      be.PagedAttentionForward(deq_d.t(), QKV.t(), deq, tab.t(), SEQ.t(), POS.t(), NH).ok());
  const Floats exact = exact_d.Get(), dequantized = deq_d.Get();

  // The quantization bound of the header comment.
  float max_v = 0.0f, max_ks = 0.0f, max_vs = 0.0f, max_q1 = 0.0f;
  for (float x : hvf) max_v = std::max(max_v, std::fabs(x));
  for (float x : hks) max_ks = std::max(max_ks, x);
  for (float x : hvs) max_vs = std::max(max_vs, x);
  for (int n = 0; n < N; ++n) {
    for (int hh = 0; hh < NH; ++hh) {
      float q1 = 0.0f;
      for (int d = 0; d < HS; ++d) q1 += std::fabs(qkv[n * 3 * C + hh * HS + d]);
      max_q1 = std::max(max_q1, q1);
    }
  }
  const float ds = max_q1 * max_ks / 2 / std::sqrt(static_cast<float>(HS));
  const float quant_tol = max_vs / 2 + std::expm1(2 * ds) * max_v;

  auto check = [&] {
    auto got_d = h.Out({N, C});
    ASSERT_TRUE(
        be.PagedAttentionForward(got_d.t(), QKV.t(), int8, tab.t(), SEQ.t(), POS.t(), NH).ok());
    const Floats got = got_d.Get();
    for (int i = 0; i < N * C; ++i) {
      ASSERT_NEAR(got[i], dequantized[i], 1e-5f * max_v) << i;
      ASSERT_NEAR(got[i], exact[i], quant_tol) << i;
    }
  };
  if (levels.empty()) check();
  for (CpuIsa isa : levels) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa scoped(isa);
    check();
  }
}

TEST_P(PagedAttentionTest, Bf16ActivationsAreTheRoundedFp32Results) {
  const int B = 2, T = 150, NH = 3, HS = 20, C = NH * HS;
  std::mt19937 rng(31);
  Layout l(B, T, rng);
  const int N = l.N, S = l.blocks * kBlock;
  Floats qkv = testing_inputs::Uniform(N * 3 * C, 32, -2.0f, 2.0f);
  std::vector<uint16_t> qkv16(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) {
    qkv16[i] = FloatToBf16(qkv[i]);
    qkv[i] = Bf16ToFloat(qkv16[i]);  // the fp32 calls see the bf16 values
  }
  auto QKV = Up(qkv, {N, 3 * C});
  auto QKV16 = Up(qkv16, {N, 3 * C});
  auto tab = Up(l.tables, {B, l.max_blocks}), SEQ = Up(l.seq, {N}), POS = Up(l.pos, {N}),
       SLOTS = Up(l.slots, {N});
  if (is_cpu()) {
    auto K = Out({S, C}), V = Out({S, C});
    const PagedKv kv{K.t(), V.t(), Tensor(), Tensor()};
    EXPECT_EQ(be().KvCacheWrite(kv, QKV16.t(), SLOTS.t(), NH).code(),
              absl::StatusCode::kInvalidArgument);
    auto out16 = Out<uint16_t>({N, C});
    EXPECT_EQ(
        be().PagedAttentionForward(out16.t(), QKV16.t(), kv, tab.t(), SEQ.t(), POS.t(), NH).code(),
        absl::StatusCode::kInvalidArgument);
    GTEST_SKIP() << "the CPU backend stores fp32 activations only";
  }
  for (bool int8 : {false, true}) {
    SCOPED_TRACE(int8 ? "int8 cache" : "fp32 cache");
    // The same cache written from the fp32 and from the bf16 qkv.
    auto k32 = Out({S, C}), v32 = Out({S, C}), k16 = Out({S, C}), v16 = Out({S, C});
    auto k8a = Out<int8_t>({S, C}), v8a = Out<int8_t>({S, C}), k8b = Out<int8_t>({S, C}),
         v8b = Out<int8_t>({S, C});
    auto ksa = Out({S, NH}), vsa = Out({S, NH}), ksb = Out({S, NH}), vsb = Out({S, NH});
    const PagedKv from32 = int8 ? PagedKv{k8a.t(), v8a.t(), ksa.t(), vsa.t()}
                                : PagedKv{k32.t(), v32.t(), Tensor(), Tensor()};
    const PagedKv from16 = int8 ? PagedKv{k8b.t(), v8b.t(), ksb.t(), vsb.t()}
                                : PagedKv{k16.t(), v16.t(), Tensor(), Tensor()};
    ASSERT_TRUE(be().KvCacheWrite(from32, QKV.t(), SLOTS.t(), NH).ok());
    ASSERT_TRUE(be().KvCacheWrite(from16, QKV16.t(), SLOTS.t(), NH).ok());
    // The written rows (the others keep their poison).
    if (int8) {
      const std::vector<int8_t> a = k8a.Get(), b = k8b.Get(), c = v8a.Get(), d = v8b.Get();
      const Floats sa = ksa.Get(), sb = ksb.Get(), ta = vsa.Get(), tb = vsb.Get();
      for (int slot : l.slots) {
        for (int i = 0; i < C; ++i) {
          ASSERT_EQ(a[slot * C + i], b[slot * C + i]) << slot;
          ASSERT_EQ(c[slot * C + i], d[slot * C + i]) << slot;
        }
        for (int h = 0; h < NH; ++h) {
          ASSERT_EQ(sa[slot * NH + h], sb[slot * NH + h]) << slot;
          ASSERT_EQ(ta[slot * NH + h], tb[slot * NH + h]) << slot;
        }
      }
    } else {
      const Floats a = k32.Get(), b = k16.Get(), c = v32.Get(), d = v16.Get();
      for (int slot : l.slots) {
        for (int i = 0; i < C; ++i) {
          ASSERT_EQ(a[slot * C + i], b[slot * C + i]) << slot;
          ASSERT_EQ(c[slot * C + i], d[slot * C + i]) << slot;
        }
      }
    }
    // Prefill (every token) and decode (each sequence's last token).
    const LastTokens last(qkv, B, T, C);
    std::vector<uint16_t> q_last16(last.qkv.size());
    for (size_t i = 0; i < last.qkv.size(); ++i) q_last16[i] = FloatToBf16(last.qkv[i]);
    struct Call {
      int rows;
      Tensor q32, q16, seq, pos;
    };
    auto QL = Up(last.qkv, {B, 3 * C});
    auto QL16 = Up(q_last16, {B, 3 * C});
    auto SL = Up(last.seq, {B}), PL = Up(last.pos, {B});
    for (const Call& call : {Call{N, QKV.t(), QKV16.t(), SEQ.t(), POS.t()},
                             Call{B, QL.t(), QL16.t(), SL.t(), PL.t()}}) {
      const int64_t rows = call.rows;
      auto o32 = Out({rows, C});
      auto o16 = Out<uint16_t>({rows, C});
      ASSERT_TRUE(
          be().PagedAttentionForward(o32.t(), call.q32, from32, tab.t(), call.seq, call.pos, NH)
              .ok());
      ASSERT_TRUE(
          be().PagedAttentionForward(o16.t(), call.q16, from32, tab.t(), call.seq, call.pos, NH)
              .ok());
      const Floats want = o32.Get();
      const std::vector<uint16_t> got = o16.Get();
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], FloatToBf16(want[i])) << "rows " << rows << ", element " << i;
      }
    }
  }
}

// HS 8, 20 and 64: under one AVX-512 register, one plus a scalar tail, four;
// T 37 (one split of positions) and 300 (three, merged).
constexpr std::pair<int, int> kInt8Shapes[] = {{8, 37}, {20, 37}, {64, 37}, {20, 300}};

TEST_P(PagedAttentionTest, Int8CacheMatchesFp32) {
  for (const auto& [HS, T] : kInt8Shapes) CheckInt8Cache(*this, HS, T, {});
}

TEST_F(CpuOnlyPagedAttentionTest, Int8CacheMatchesFp32AtEveryLevel) {
  for (const auto& [HS, T] : kInt8Shapes) CheckInt8Cache(*this, HS, T, testing_inputs::Levels());
}

TEST_P(PagedAttentionTest, LargeChunkWritesItsRowsBitForBit) {
  const int N = 600, NH = 4, HS = 64, C = NH * HS, S = N + 40;
  std::mt19937 rng(31);
  Ints rows(S);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  const Ints slots(rows.begin(), rows.begin() + N);
  const Floats qkv = testing_inputs::Uniform(N * 3 * C, 32);
  auto QKV = Up(qkv, {N, 3 * C});
  auto SLOTS = Up(slots, {N});
  auto kf = Out({S, C}), vf = Out({S, C});
  auto k8 = Out<int8_t>({S, C}), v8 = Out<int8_t>({S, C});
  auto ks = Out({S, NH}), vs = Out({S, NH});
  const std::vector<int8_t> poison8 = k8.Get();
  ASSERT_TRUE(be().KvCacheWrite({kf.t(), vf.t(), Tensor(), Tensor()}, QKV.t(), SLOTS.t(), NH).ok());
  ASSERT_TRUE(be().KvCacheWrite({k8.t(), v8.t(), ks.t(), vs.t()}, QKV.t(), SLOTS.t(), NH).ok());
  const Floats got_f[2] = {kf.Get(), vf.Get()}, got_s[2] = {ks.Get(), vs.Get()};
  const std::vector<int8_t> got_8[2] = {k8.Get(), v8.Get()};
  std::vector<int> token_of(S, -1);
  for (int n = 0; n < N; ++n) token_of[slots[n]] = n;
  std::vector<int8_t> want8(HS);
  for (int kv = 0; kv < 2; ++kv) {
    SCOPED_TRACE(kv == 0 ? "k" : "v");
    for (int r = 0; r < S; ++r) {
      const int n = token_of[r];
      for (int h = 0; h < NH; ++h) {
        const float* f = got_f[kv].data() + r * C + h * HS;
        const int8_t* q = got_8[kv].data() + r * C + h * HS;
        if (n < 0) {  // not written: the poison stays
          for (int d = 0; d < HS; ++d) ASSERT_TRUE(std::isnan(f[d])) << r;
          ASSERT_TRUE(std::isnan(got_s[kv][r * NH + h])) << r;
          ASSERT_TRUE(std::equal(q, q + HS, poison8.begin() + r * C + h * HS)) << r;
          continue;
        }
        const float* x = qkv.data() + n * 3 * C + (kv + 1) * C + h * HS;
        for (int d = 0; d < HS; ++d) ASSERT_EQ(f[d], x[d]) << r << "," << h << "," << d;
        const float scale = QuantizeSymmetric(x, HS, want8.data());
        ASSERT_EQ(got_s[kv][r * NH + h], scale) << r << "," << h;
        ASSERT_TRUE(std::equal(q, q + HS, want8.begin())) << r << "," << h;
      }
    }
  }
}

TEST_P(PagedAttentionTest, Int8ScalesAreChecked) {
  const int NH = 2, HS = 16, C = NH * HS, S = 32, N = 1;
  auto K = Up(std::vector<int8_t>(S * C, 0), {S, C}), V = Up(std::vector<int8_t>(S * C, 0), {S, C});
  auto KSa = Up(Floats(S * NH, 0.0f), {S, NH}), VSa = Up(Floats(S * NH, 0.0f), {S, NH});
  const Tensor KS = KSa.t(), VS = VSa.t();
  auto qkv = Up(Floats(N * 3 * C, 0.5f), {N, 3 * C}), out = Out({N, C});
  auto slots = Up(Ints{3}, {N}), table = Up(Ints{0, 1}, {1, 2}), seq = Up(Ints{0}, {N}),
       pos = Up(Ints{3}, {N});
  Backend& be = this->be();
  const auto write = [&](const PagedKv& kv) {
    return be.KvCacheWrite(kv, qkv.t(), slots.t(), NH).code();
  };
  const auto attend = [&](const PagedKv& kv) {
    return be.PagedAttentionForward(out.t(), qkv.t(), kv, table.t(), seq.t(), pos.t(), NH).code();
  };
  constexpr auto kBad = absl::StatusCode::kInvalidArgument;
  ASSERT_EQ(write({K.t(), V.t(), KS, VS}), absl::StatusCode::kOk);
  ASSERT_EQ(attend({K.t(), V.t(), KS, VS}), absl::StatusCode::kOk);
  Tensor ks_i32 = KS;
  ks_i32.dtype = DType::kI32;
  const PagedKv bad[] = {
      {K.t(), V.t(), Tensor(), Tensor()},      // no scales: int8 k, v read as fp32
      {K.t(), V.t(), KS, Tensor()},            // v scales missing
      {K.t(), V.t(), KSa.t({S, NH - 1}), VS},  // one scale per row short
      {K.t(), V.t(), KS, VSa.t({S / 2, NH})},  // half the rows
      {K.t(), V.t(), ks_i32, VS},              // scales not f32
  };
  for (const PagedKv& kv : bad) {
    EXPECT_EQ(write(kv), kBad);
    EXPECT_EQ(attend(kv), kBad);
  }
}

}  // namespace
}  // namespace ladder
