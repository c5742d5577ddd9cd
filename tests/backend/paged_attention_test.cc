// Attention over the paged KV cache equals the training attention: the same
// random q, k and v, written into randomly placed cache blocks, give the
// same outputs as AttentionForward over the whole sequences (within 2e-6),
// for every token at once (a prefill) and for last tokens alone (a decode).
// Bad indices are refused before anything is read.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"

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
  ASSERT_TRUE(be.AttentionForward(
                    Tensor::F32(want.data(), {B, T, C}), Tensor::F32(lse.data(), {B, NH, T}),
                    Tensor::F32(qkv.data(), {B, T, 3 * C}), NH, AttentionKind::kFlash, Tensor())
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
  Tensor K = Tensor::F32(kc.data(), {blocks * kBlock, C}),
         V = Tensor::F32(vc.data(), {blocks * kBlock, C});
  Tensor tab = Tensor::I32(tables.data(), {B, max_blocks});
  const PagedKv kv{K, V, Tensor(), Tensor()};
  ASSERT_TRUE(
      be.KvCacheWrite(kv, Tensor::F32(qkv.data(), {N, 3 * C}), Tensor::I32(slots.data(), {N}), NH)
          .ok());
  std::vector<float> got(N * C);
  ASSERT_TRUE(be.PagedAttentionForward(
                    Tensor::F32(got.data(), {N, C}), Tensor::F32(qkv.data(), {N, 3 * C}), kv, tab,
                    Tensor::I32(seq.data(), {N}), Tensor::I32(pos.data(), {N}), NH)
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
  ASSERT_TRUE(be.PagedAttentionForward(
                    Tensor::F32(one.data(), {B, C}), Tensor::F32(q_last.data(), {B, 3 * C}), kv,
                    tab, Tensor::I32(s_last.data(), {B}), Tensor::I32(p_last.data(), {B}), NH)
                  .ok());
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c) ASSERT_NEAR(one[b * C + c], want[(b * T + T - 1) * C + c], 2e-6f);
  }

  // A position past the table, a block outside the cache, a slot outside it.
  p_last[0] = max_blocks * kBlock;
  EXPECT_EQ(be.PagedAttentionForward(
                  Tensor::F32(one.data(), {B, C}), Tensor::F32(q_last.data(), {B, 3 * C}), kv, tab,
                  Tensor::I32(s_last.data(), {B}), Tensor::I32(p_last.data(), {B}), NH)
                .code(),
            absl::StatusCode::kInvalidArgument);
  p_last[0] = T - 1;
  tables[0] = blocks;
  EXPECT_EQ(be.PagedAttentionForward(
                  Tensor::F32(one.data(), {B, C}), Tensor::F32(q_last.data(), {B, 3 * C}), kv, tab,
                  Tensor::I32(s_last.data(), {B}), Tensor::I32(p_last.data(), {B}), NH)
                .code(),
            absl::StatusCode::kInvalidArgument);
  slots[0] = blocks * kBlock;
  EXPECT_EQ(
      be.KvCacheWrite(kv, Tensor::F32(qkv.data(), {N, 3 * C}), Tensor::I32(slots.data(), {N}), NH)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ladder
