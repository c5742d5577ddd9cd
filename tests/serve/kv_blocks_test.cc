// The paged KV block pool: block tables grow a block at a time, identical
// prompt prefixes share their full blocks once filled (in every cache) but
// never the block holding a prompt's last token, released prefixes stay
// cached until their blocks are needed (unfilled ones do not), admission
// refuses what does not fit without changing anything, and every block
// comes back when every sequence is freed.
#include "src/serve/kv_blocks.h"

#include <numeric>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace ladder {
namespace {

std::vector<int32_t> Tokens(int n, int32_t first = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(KvBlocksTest, TablesGrowABlockAtATime) {
  KvBlockPool pool(8);
  auto s = pool.AddSequence(Tokens(20));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(pool.BlockTable(*s).size(), 2u);
  EXPECT_EQ(pool.used_blocks(), 2);
  ASSERT_TRUE(pool.Append(*s, Tokens(12, 20)).ok());  // 32 tokens: still 2 blocks
  EXPECT_EQ(pool.BlockTable(*s).size(), 2u);
  ASSERT_TRUE(pool.Append(*s, {7}).ok());
  EXPECT_EQ(pool.BlockTable(*s).size(), 3u);
  EXPECT_EQ(pool.Length(*s), 33);
  const std::vector<int32_t>& t = pool.BlockTable(*s);
  EXPECT_EQ(std::set<int32_t>(t.begin(), t.end()).size(), 3u) << "blocks are distinct";
  ASSERT_TRUE(pool.Free(*s).ok());
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.Free(*s).code(), absl::StatusCode::kNotFound);
}

TEST(KvBlocksTest, IdenticalPrefixesShareFullBlocksOnly) {
  KvBlockPool pool(16);
  int64_t shared = -1;
  auto a = pool.AddSequence(Tokens(40), &shared);  // 2 full blocks + 8 tokens
  EXPECT_EQ(shared, 0);
  pool.MarkFilled(*a, 0, 40);
  auto b = pool.AddSequence(Tokens(40), &shared);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(shared, 32);
  EXPECT_EQ(pool.used_blocks(), 4) << "2 shared full blocks + 2 private last blocks";
  EXPECT_EQ(pool.BlockTable(*a)[0], pool.BlockTable(*b)[0]);
  EXPECT_EQ(pool.BlockTable(*a)[1], pool.BlockTable(*b)[1]);
  EXPECT_NE(pool.BlockTable(*a)[2], pool.BlockTable(*b)[2]);
  // Same second block, different first: no sharing past the difference.
  std::vector<int32_t> other = Tokens(40);
  other[3] = 999;
  auto c = pool.AddSequence(other, &shared);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(shared, 0);
  // A block filled by decoding becomes shareable too.
  ASSERT_TRUE(pool.Append(*a, Tokens(8, 40)).ok());  // a: 48 tokens, 3 full blocks
  pool.MarkFilled(*a, 0, 48);
  auto d = pool.AddSequence(Tokens(50), &shared);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(shared, 48);
  for (auto s : {*a, *b, *c, *d}) ASSERT_TRUE(pool.Free(s).ok());
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.free_blocks(), 16);
}

TEST(KvBlocksTest, ReleasedPrefixesStayCachedUntilNeeded) {
  KvBlockPool pool(4);
  auto a = pool.AddSequence(Tokens(32));
  ASSERT_TRUE(a.ok());
  pool.MarkFilled(*a, 0, 32);
  ASSERT_TRUE(pool.Free(*a).ok());
  int64_t shared = 0;
  auto b = pool.AddSequence(Tokens(33), &shared);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(shared, 32) << "the freed prefix was still cached";
  ASSERT_TRUE(pool.Free(*b).ok());
  // Filling the pool with other text reclaims the cached blocks.
  auto c = pool.AddSequence(Tokens(64, 500));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(pool.free_blocks(), 0);
  ASSERT_TRUE(pool.Free(*c).ok());
  auto d = pool.AddSequence(Tokens(32), &shared);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(shared, 0) << "reclaimed blocks must forget their old prefix";
}

TEST(KvBlocksTest, AdmissionRefusesWithoutSideEffects) {
  KvBlockPool pool(3);
  auto a = pool.AddSequence(Tokens(40));  // 3 blocks
  ASSERT_TRUE(a.ok());
  auto b = pool.AddSequence(Tokens(1, 700));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.Append(*a, Tokens(9)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.Length(*a), 40);
  EXPECT_EQ(pool.used_blocks(), 3);
  // Sharing needs no fresh blocks for the shared part.
  KvBlockPool two(3);
  auto x = two.AddSequence(Tokens(32));
  two.MarkFilled(*x, 0, 32);
  auto y = two.AddSequence(Tokens(33));
  ASSERT_TRUE(x.ok() && y.ok()) << y.status();
  EXPECT_EQ(two.used_blocks(), 3);
}

TEST(KvBlocksTest, OnlyBlocksFilledInEveryCacheAreShared) {
  KvBlockPool pool(16, /*caches=*/2);
  int64_t shared = -1;
  auto a = pool.AddSequence(Tokens(40), &shared);
  ASSERT_TRUE(a.ok());
  // Named at admission, but no forward has written them: a second copy.
  auto b = pool.AddSequence(Tokens(40), &shared);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(shared, 0);
  EXPECT_EQ(pool.used_blocks(), 6);
  pool.MarkFilled(*a, 0, 40);  // the target's cache only
  auto c = pool.AddSequence(Tokens(40), &shared);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(shared, 0) << "the draft's cache does not hold them yet";
  pool.MarkFilled(*a, 1, 20);  // the draft's, first block only
  auto d = pool.AddSequence(Tokens(40), &shared);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(shared, 16);
  EXPECT_EQ(pool.BlockTable(*d)[0], pool.BlockTable(*a)[0]);
  EXPECT_NE(pool.BlockTable(*d)[1], pool.BlockTable(*a)[1]);
  pool.MarkFilled(*a, 1, 1000);  // past the end: up to the last full block
  pool.MarkFilled(*a, 5, 40);    // not a cache of this pool: ignored
  auto e = pool.AddSequence(Tokens(40), &shared);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(shared, 32);
  // A pool of one cache ignores marks for a second.
  KvBlockPool one(4);
  auto x = one.AddSequence(Tokens(20));
  ASSERT_TRUE(x.ok());
  one.MarkFilled(*x, 1, 20);
  EXPECT_TRUE(one.AddSequence(Tokens(20), &shared).ok());
  EXPECT_EQ(shared, 0);
}

TEST(KvBlocksTest, TheLastTokensBlockIsNeverShared) {
  KvBlockPool pool(8);
  int64_t shared = -1;
  auto a = pool.AddSequence(Tokens(32));
  ASSERT_TRUE(a.ok());
  pool.MarkFilled(*a, 0, 32);
  // The same 32 tokens: running them needs the last token's row written,
  // so its block is a private one.
  auto b = pool.AddSequence(Tokens(32), &shared);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(shared, 16);
  EXPECT_EQ(pool.BlockTable(*b)[0], pool.BlockTable(*a)[0]);
  EXPECT_NE(pool.BlockTable(*b)[1], pool.BlockTable(*a)[1]);
  // One token more and both full blocks are before the last token.
  auto c = pool.AddSequence(Tokens(33), &shared);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(shared, 32);
  // Without reuse_cache nothing is shared.
  auto d = pool.AddSequence(Tokens(33), &shared, /*reuse_cache=*/false);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(shared, 0);
  EXPECT_EQ(pool.used_blocks(), 2 + 1 + 1 + 3);
}

TEST(KvBlocksTest, UnfilledBlocksForgetTheirNameWhenReleased) {
  KvBlockPool pool(8);
  int64_t shared = -1;
  auto a = pool.AddSequence(Tokens(48));
  ASSERT_TRUE(a.ok());
  pool.MarkFilled(*a, 0, 20);                      // a stops (is cancelled) after its first block
  auto b = pool.AddSequence(Tokens(48), &shared);  // a copy of block 1 onwards
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(shared, 16);
  ASSERT_TRUE(pool.Free(*a).ok());
  // a's unfilled blocks gave up their names when released. b's copies were
  // never named (a held the names when b came), so a later prompt finds
  // only the first block, and names the rest itself.
  pool.MarkFilled(*b, 0, 48);
  auto c = pool.AddSequence(Tokens(49), &shared);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(shared, 16) << "only the filled block kept its name";
  pool.MarkFilled(*c, 0, 49);
  ASSERT_TRUE(pool.Free(*b).ok());
  ASSERT_TRUE(pool.Free(*c).ok());
  auto d = pool.AddSequence(Tokens(49), &shared);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(shared, 48) << "c named and filled the blocks a had left";
}

TEST(KvBlocksTest, RandomWorkloadReturnsEveryBlock) {
  KvBlockPool pool(64);
  std::mt19937 rng(11);
  std::vector<KvBlockPool::SequenceId> live;
  for (int i = 0; i < 2000; ++i) {
    if (live.empty() || rng() % 3 == 0) {
      // Prompts from a few shared stems, so prefixes collide often.
      std::vector<int32_t> p =
          Tokens(static_cast<int>(rng() % 60) + 1, static_cast<int32_t>(rng() % 3) * 1000);
      auto s = pool.AddSequence(p);
      if (s.ok()) live.push_back(*s);
      if (s.ok() && rng() % 2 == 0) pool.MarkFilled(*s, 0, static_cast<int64_t>(rng() % 64));
    } else if (rng() % 2 == 0) {
      const size_t k = rng() % live.size();
      pool.Append(live[k], Tokens(static_cast<int>(rng() % 20) + 1, 77)).IgnoreError();
    } else {
      const size_t k = rng() % live.size();
      ASSERT_TRUE(pool.Free(live[k]).ok());
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    ASSERT_LE(pool.used_blocks(), 64);
    for (auto s : live) {
      ASSERT_EQ(pool.BlockTable(s).size(),
                static_cast<size_t>(KvBlockPool::BlocksFor(pool.Length(s))));
    }
  }
  for (auto s : live) ASSERT_TRUE(pool.Free(s).ok());
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.free_blocks(), 64);
}

}  // namespace
}  // namespace ladder
