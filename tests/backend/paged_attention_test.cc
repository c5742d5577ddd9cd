// Attention over the paged KV cache equals the training attention: the same
// random q, k and v, written into randomly placed cache blocks, give the
// same outputs as AttentionForward over the whole sequences (within 2e-6),
// for every token at once (a prefill) and for last tokens alone (a decode).
// Bad indices are refused before anything is read.
//
// The int8 cache, at every ISA level this CPU supports (cpu_isa.h):
//  - equals fp32 attention over the cache's own dequantized values (q *
//    scale) within 1e-5 x max|v| per element: only float rounding differs
//    (the outputs are weighted means of v, so max|v| is their scale);
//  - is within the quantization bound of fp32 attention over the exact
//    values: each k and v value moves by at most its row's scale / 2, so a
//    score moves by at most ds = sum_d |q_d| max(k scale) / 2 / sqrt(HS), the
//    softmax weights by at most e^(2 ds) - 1 in sum, and an output by at most
//    max(v scale) / 2 + (e^(2 ds) - 1) max|v|.
// Missing or misshapen scales are refused.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_isa.h"

namespace ladder {
namespace {

TEST(PagedAttentionTest, EqualsFullAttention) {
  const int B = 3, T = 37, NH = 4, HS = 8, C = NH * HS, kBlock = 16;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(B * T * 3 * C);
  for (float& x : qkv) x = u(rng);
  CpuBackend be;
  std::vector<float> want(B * T * C), lse(B * NH * T);
  ASSERT_TRUE(be.AttentionForward(Tensor::F32(want.data(), {B, T, C}, Device::kCpu),
                                  Tensor::F32(lse.data(), {B, NH, T}, Device::kCpu),
                                  Tensor::F32(qkv.data(), {B, T, 3 * C}, Device::kCpu), NH,
                                  AttentionKind::kFlash, Tensor())
                  .ok());

  // Each sequence's blocks at random places of a larger cache.
  const int max_blocks = (T + kBlock - 1) / kBlock, blocks = B * max_blocks + 5;
  std::vector<int32_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> tables(B * max_blocks);
  std::copy(order.begin(), order.begin() + B * max_blocks, tables.begin());
  const int N = B * T;
  std::vector<int32_t> seq(N), pos(N), slots(N);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      seq[b * T + t] = b;
      pos[b * T + t] = t;
      slots[b * T + t] = tables[b * max_blocks + t / kBlock] * kBlock + t % kBlock;
    }
  }
  std::vector<float> kc(blocks * kBlock * C, NAN), vc(blocks * kBlock * C, NAN);
  Tensor K = Tensor::F32(kc.data(), {blocks * kBlock, C}, Device::kCpu),
         V = Tensor::F32(vc.data(), {blocks * kBlock, C}, Device::kCpu);
  Tensor tab = Tensor::I32(tables.data(), {B, max_blocks}, Device::kCpu);
  const PagedKv kv{K, V, Tensor(), Tensor()};
  ASSERT_TRUE(be.KvCacheWrite(kv, Tensor::F32(qkv.data(), {N, 3 * C}, Device::kCpu),
                              Tensor::I32(slots.data(), {N}, Device::kCpu), NH)
                  .ok());
  std::vector<float> got(N * C);
  ASSERT_TRUE(be.PagedAttentionForward(Tensor::F32(got.data(), {N, C}, Device::kCpu),
                                       Tensor::F32(qkv.data(), {N, 3 * C}, Device::kCpu), kv, tab,
                                       Tensor::I32(seq.data(), {N}, Device::kCpu),
                                       Tensor::I32(pos.data(), {N}, Device::kCpu), NH)
                  .ok());
  for (int i = 0; i < N * C; ++i) ASSERT_NEAR(got[i], want[i], 2e-6f) << i;

  // Decode: only each sequence's last token asks.
  std::vector<float> q_last(B * 3 * C), one(B * C);
  std::vector<int32_t> s_last(B), p_last(B);
  for (int b = 0; b < B; ++b) {
    std::copy_n(qkv.begin() + (b * T + T - 1) * 3 * C, 3 * C, q_last.begin() + b * 3 * C);
    s_last[b] = b;
    p_last[b] = T - 1;
  }
  ASSERT_TRUE(be.PagedAttentionForward(Tensor::F32(one.data(), {B, C}, Device::kCpu),
                                       Tensor::F32(q_last.data(), {B, 3 * C}, Device::kCpu), kv,
                                       tab, Tensor::I32(s_last.data(), {B}, Device::kCpu),
                                       Tensor::I32(p_last.data(), {B}, Device::kCpu), NH)
                  .ok());
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c) ASSERT_NEAR(one[b * C + c], want[(b * T + T - 1) * C + c], 2e-6f);
  }

  // A position past the table, a block outside the cache, a slot outside it.
  p_last[0] = max_blocks * kBlock;
  EXPECT_EQ(be.PagedAttentionForward(Tensor::F32(one.data(), {B, C}, Device::kCpu),
                                     Tensor::F32(q_last.data(), {B, 3 * C}, Device::kCpu), kv, tab,
                                     Tensor::I32(s_last.data(), {B}, Device::kCpu),
                                     Tensor::I32(p_last.data(), {B}, Device::kCpu), NH)
                .code(),
            absl::StatusCode::kInvalidArgument);
  p_last[0] = T - 1;
  tables[0] = blocks;
  EXPECT_EQ(be.PagedAttentionForward(Tensor::F32(one.data(), {B, C}, Device::kCpu),
                                     Tensor::F32(q_last.data(), {B, 3 * C}, Device::kCpu), kv, tab,
                                     Tensor::I32(s_last.data(), {B}, Device::kCpu),
                                     Tensor::I32(p_last.data(), {B}, Device::kCpu), NH)
                .code(),
            absl::StatusCode::kInvalidArgument);
  slots[0] = blocks * kBlock;
  EXPECT_EQ(be.KvCacheWrite(kv, Tensor::F32(qkv.data(), {N, 3 * C}, Device::kCpu),
                            Tensor::I32(slots.data(), {N}, Device::kCpu), NH)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// HS 8, 20 and 64: under one AVX-512 register, one plus a scalar tail, four.
TEST(PagedAttentionTest, Int8CacheMatchesFp32AtEveryLevel) {
  for (const int HS : {8, 20, 64}) {
    SCOPED_TRACE(::testing::Message() << "HS=" << HS);
    const int B = 2, T = 37, NH = 3, C = NH * HS, kBlock = 16;
    const int max_blocks = (T + kBlock - 1) / kBlock, S = B * max_blocks * kBlock, N = B * T;
    std::mt19937 rng(11 + HS);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> qkv(N * 3 * C);
    for (float& x : qkv) x = u(rng);
    // Sequence b owns blocks b * max_blocks + i, reversed so rows are not in order.
    std::vector<int32_t> tables(B * max_blocks), seq(N), pos(N), slots(N);
    for (int i = 0; i < B * max_blocks; ++i) tables[i] = B * max_blocks - 1 - i;
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        seq[b * T + t] = b;
        pos[b * T + t] = t;
        slots[b * T + t] = tables[b * max_blocks + t / kBlock] * kBlock + t % kBlock;
      }
    }
    CpuBackend be;
    const Tensor QKV = Tensor::F32(qkv.data(), {N, 3 * C}, Device::kCpu),
                 tab = Tensor::I32(tables.data(), {B, max_blocks}, Device::kCpu),
                 SEQ = Tensor::I32(seq.data(), {N}, Device::kCpu),
                 POS = Tensor::I32(pos.data(), {N}, Device::kCpu),
                 SLOTS = Tensor::I32(slots.data(), {N}, Device::kCpu);
    std::vector<float> kf(S * C), vf(S * C);
    const PagedKv fp32{Tensor::F32(kf.data(), {S, C}, Device::kCpu),
                       Tensor::F32(vf.data(), {S, C}, Device::kCpu), Tensor(), Tensor()};
    std::vector<int8_t> k8(S * C), v8(S * C);
    std::vector<float> ks(S * NH), vs(S * NH);
    const PagedKv int8{Tensor::I8(k8.data(), {S, C}, Device::kCpu),
                       Tensor::I8(v8.data(), {S, C}, Device::kCpu),
                       Tensor::F32(ks.data(), {S, NH}, Device::kCpu),
                       Tensor::F32(vs.data(), {S, NH}, Device::kCpu)};
    ASSERT_TRUE(be.KvCacheWrite(fp32, QKV, SLOTS, NH).ok());
    ASSERT_TRUE(be.KvCacheWrite(int8, QKV, SLOTS, NH).ok());

    // An fp32 cache holding the int8 cache's values, dequantized.
    std::vector<float> kd(S * C), vd(S * C);
    for (int r = 0; r < S; ++r) {
      for (int c = 0; c < C; ++c) {
        kd[r * C + c] = k8[r * C + c] * ks[r * NH + c / HS];
        vd[r * C + c] = v8[r * C + c] * vs[r * NH + c / HS];
      }
    }
    const PagedKv deq{Tensor::F32(kd.data(), {S, C}, Device::kCpu),
                      Tensor::F32(vd.data(), {S, C}, Device::kCpu), Tensor(), Tensor()};
    std::vector<float> exact(N * C), dequantized(N * C);
    ASSERT_TRUE(be.PagedAttentionForward(Tensor::F32(exact.data(), {N, C}, Device::kCpu), QKV, fp32,
                                         tab, SEQ, POS, NH)
                    .ok());
    ASSERT_TRUE(be.PagedAttentionForward(Tensor::F32(dequantized.data(), {N, C}, Device::kCpu), QKV,
                                         deq, tab, SEQ, POS, NH)
                    .ok());

    // The quantization bound of the header comment.
    float max_v = 0.0f, max_ks = 0.0f, max_vs = 0.0f, max_q1 = 0.0f;
    for (float x : vf) max_v = std::max(max_v, std::fabs(x));
    for (float x : ks) max_ks = std::max(max_ks, x);
    for (float x : vs) max_vs = std::max(max_vs, x);
    for (int n = 0; n < N; ++n) {
      for (int h = 0; h < NH; ++h) {
        float q1 = 0.0f;
        for (int d = 0; d < HS; ++d) q1 += std::fabs(qkv[n * 3 * C + h * HS + d]);
        max_q1 = std::max(max_q1, q1);
      }
    }
    const float ds = max_q1 * max_ks / 2 / std::sqrt(static_cast<float>(HS));
    const float quant_tol = max_vs / 2 + std::expm1(2 * ds) * max_v;

    for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (isa > SupportedCpuIsa()) continue;
      SCOPED_TRACE(CpuIsaName(isa));
      ScopedCpuIsa scoped(isa);
      std::vector<float> got(N * C, NAN);
      ASSERT_TRUE(be.PagedAttentionForward(Tensor::F32(got.data(), {N, C}, Device::kCpu), QKV, int8,
                                           tab, SEQ, POS, NH)
                      .ok());
      for (int i = 0; i < N * C; ++i) {
        ASSERT_NEAR(got[i], dequantized[i], 1e-5f * max_v) << i;
        ASSERT_NEAR(got[i], exact[i], quant_tol) << i;
      }
    }
  }
}

TEST(PagedAttentionTest, Int8ScalesAreChecked) {
  const int NH = 2, HS = 16, C = NH * HS, S = 32, N = 1;
  std::vector<int8_t> k8(S * C), v8(S * C);
  std::vector<float> ks(S * NH), vs(S * NH), qkv(N * 3 * C), out(N * C);
  std::vector<int32_t> slots = {3}, table = {0, 1}, seq = {0}, pos = {3};
  const Tensor K = Tensor::I8(k8.data(), {S, C}, Device::kCpu),
               V = Tensor::I8(v8.data(), {S, C}, Device::kCpu),
               KS = Tensor::F32(ks.data(), {S, NH}, Device::kCpu),
               VS = Tensor::F32(vs.data(), {S, NH}, Device::kCpu);
  CpuBackend be;
  const auto write = [&](const PagedKv& kv) {
    return be
        .KvCacheWrite(kv, Tensor::F32(qkv.data(), {N, 3 * C}, Device::kCpu),
                      Tensor::I32(slots.data(), {N}, Device::kCpu), NH)
        .code();
  };
  const auto attend = [&](const PagedKv& kv) {
    return be
        .PagedAttentionForward(Tensor::F32(out.data(), {N, C}, Device::kCpu),
                               Tensor::F32(qkv.data(), {N, 3 * C}, Device::kCpu), kv,
                               Tensor::I32(table.data(), {1, 2}, Device::kCpu),
                               Tensor::I32(seq.data(), {N}, Device::kCpu),
                               Tensor::I32(pos.data(), {N}, Device::kCpu), NH)
        .code();
  };
  constexpr auto kBad = absl::StatusCode::kInvalidArgument;
  ASSERT_EQ(write({K, V, KS, VS}), absl::StatusCode::kOk);
  ASSERT_EQ(attend({K, V, KS, VS}), absl::StatusCode::kOk);
  const PagedKv bad[] = {
      {K, V, Tensor(), Tensor()},  // no scales: int8 k, v read as fp32
      {K, V, KS, Tensor()},        // v scales missing
      {K, V, Tensor::F32(ks.data(), {S, NH - 1}, Device::kCpu), VS},      // one scale per row short
      {K, V, KS, Tensor::F32(vs.data(), {S / 2, NH}, Device::kCpu)},      // half the rows
      {K, V, Tensor(ks.data(), DType::kI32, {S, NH}, Device::kCpu), VS},  // scales not f32
  };
  for (const PagedKv& kv : bad) {
    EXPECT_EQ(write(kv), kBad);
    EXPECT_EQ(attend(kv), kBad);
  }
}

}  // namespace
}  // namespace ladder
