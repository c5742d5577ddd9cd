// BatchReader: prefetching changes when batches are read, never which; its
// position is the checkpoint's (after the last batch handed out), and
// Restore and Reseed act there. The loading hook runs on the thread that
// reads, and slow-data makes it slow.
#include "src/train/batch_reader.h"

#include <atomic>
#include <numeric>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/core/timer.h"
#include "src/train/fault_env.h"

namespace ladder {
namespace {

constexpr int kT = 4, kRows = 3;

std::vector<int32_t> Tokens() {
  std::vector<int32_t> t(50 * kT + 1);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

// Counts the loads and notes whether any ran off the calling thread.
class CountingEnv : public Env {
 public:
  void LoadingBatch() override {
    ++loads;
    if (std::this_thread::get_id() != caller) off_thread = true;
  }
  std::atomic<int> loads{0};
  std::atomic<bool> off_thread{false};
  std::thread::id caller = std::this_thread::get_id();
};

std::unique_ptr<BatchReader> Reader(const std::vector<int32_t>& tokens, bool prefetch, Env* env,
                                    uint64_t seed = 7) {
  return std::make_unique<BatchReader>(*DataLoader::Create(tokens, kT, seed), 2 * kRows, kRows,
                                       kRows, prefetch, env);
}

// The next batch: inputs then targets.
std::vector<int32_t> Next(BatchReader& r) {
  std::vector<int32_t> in(kRows * kT, -1), tgt(kRows * kT, -1);
  r.Next(in.data(), tgt.data());
  in.insert(in.end(), tgt.begin(), tgt.end());
  return in;
}

bool SamePosition(DataLoader::Position a, DataLoader::Position b) {
  return a.epoch == b.epoch && a.index == b.index;
}

TEST(BatchReaderTest, PrefetchReadsTheSameBatchesOnAnotherThread) {
  const auto tokens = Tokens();
  CountingEnv plain_env, ahead_env;
  auto plain = Reader(tokens, false, &plain_env), ahead = Reader(tokens, true, &ahead_env);
  // 20 batches of 6 windows cross two epochs of 50.
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(Next(*plain), Next(*ahead)) << "batch " << i;
    EXPECT_TRUE(SamePosition(plain->position(), ahead->position())) << "batch " << i;
  }
  EXPECT_EQ(plain_env.loads, 20);
  EXPECT_FALSE(plain_env.off_thread);
  EXPECT_TRUE(ahead_env.off_thread);
}

TEST(BatchReaderTest, RestoreAndReseedActAtTheHandedOutPosition) {
  const auto tokens = Tokens();
  for (const bool prefetch : {false, true}) {
    SCOPED_TRACE(prefetch ? "prefetch" : "synchronous");
    CountingEnv env;
    auto r = Reader(tokens, prefetch, &env);
    Next(*r);
    Next(*r);
    const DataLoader::Position at2 = r->position();
    const auto third = Next(*r);
    Next(*r);
    ASSERT_TRUE(r->Restore(at2).ok());
    EXPECT_TRUE(SamePosition(r->position(), at2));
    EXPECT_EQ(Next(*r), third);
    // A position that is not a window is refused, and the next batch is
    // still the one after the last handed out.
    auto twin = Reader(tokens, false, &env);
    ASSERT_TRUE(twin->Restore(r->position()).ok());
    EXPECT_FALSE(r->Restore({0, 1000}).ok());
    EXPECT_EQ(Next(*r), Next(*twin));
    // Another seed: the same position, other windows than the old order's.
    const DataLoader::Position before = r->position();
    auto old_order = Reader(tokens, false, &env);
    ASSERT_TRUE(old_order->Restore(before).ok());
    r->Reseed(8);
    EXPECT_TRUE(SamePosition(r->position(), before));
    EXPECT_NE(Next(*r), Next(*old_order));
    // ... and those of a loader seeded so from the start, at that position.
    auto reseeded = Reader(tokens, false, &env, 8);
    ASSERT_TRUE(reseeded->Restore(before).ok());
    Next(*reseeded);
    EXPECT_EQ(Next(*r), Next(*reseeded));
  }
}

TEST(BatchReaderTest, SlowDataDelaysEveryLoad) {
  auto env = FaultEnv::Parse("slow-data:30");
  ASSERT_TRUE(env.ok()) << env.status();
  const Timer timer;
  (*env)->LoadingBatch();
  EXPECT_GE(timer.Seconds(), 0.030);
  for (const char* bad : {"slow-data:", "slow-data:-1", "slow-data:5x"}) {
    const auto parsed = FaultEnv::Parse(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("slow-data:MS"), std::string::npos);
  }
}

}  // namespace
}  // namespace ladder
