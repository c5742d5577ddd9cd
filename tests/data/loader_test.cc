#include "src/data/loader.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ladder {
namespace {

constexpr int kT = 4;

std::vector<int32_t> Iota(size_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// One global batch: rows x kT inputs followed by rows x kT targets.
std::vector<int32_t> Batch(DataLoader& loader, int rows, int begin, int count) {
  std::vector<int32_t> in(count * kT), tgt(count * kT);
  loader.Next(rows, begin, count, in.data(), tgt.data());
  in.insert(in.end(), tgt.begin(), tgt.end());
  return in;
}

TEST(LoaderTest, RejectsTooLittleData) {
  const std::vector<int32_t> tokens = Iota(kT);
  auto loader = DataLoader::Create(tokens, kT, 1);
  EXPECT_EQ(loader.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(DataLoader::Create(Iota(kT + 1), kT, 1).ok());
}

TEST(LoaderTest, RowsAreShiftedWindows) {
  const std::vector<int32_t> tokens = Iota(10 * kT + 3);
  auto loader = DataLoader::Create(tokens, kT, 5);
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(loader->num_windows(), 10u);
  std::vector<int32_t> in(kT), tgt(kT);
  loader->Next(1, 0, 1, in.data(), tgt.data());
  EXPECT_EQ(in[0] % kT, 0);
  for (int t = 0; t < kT; ++t) {
    EXPECT_EQ(in[t], in[0] + t);
    EXPECT_EQ(tgt[t], in[t] + 1);
  }
}

TEST(LoaderTest, SameSeedSameBatchesOtherSeedDiffers) {
  const std::vector<int32_t> tokens = Iota(1000);
  auto a = DataLoader::Create(tokens, kT, 7);
  auto b = DataLoader::Create(tokens, kT, 7);
  auto c = DataLoader::Create(tokens, kT, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool differs = false;
  for (int step = 0; step < 100; ++step) {
    const auto batch = Batch(*a, 8, 0, 8);
    EXPECT_EQ(batch, Batch(*b, 8, 0, 8));
    differs |= batch != Batch(*c, 8, 0, 8);
  }
  EXPECT_TRUE(differs);
}

TEST(LoaderTest, EachEpochVisitsEveryWindowOnceInANewOrder) {
  const std::vector<int32_t> tokens = Iota(37 * kT + 1);
  auto loader = DataLoader::Create(tokens, kT, 3);
  ASSERT_TRUE(loader.ok());
  const uint64_t windows = loader->num_windows();
  ASSERT_EQ(windows, 37u);
  // Batches of 5 do not divide 37, so batches straddle epoch boundaries.
  std::vector<int32_t> starts;
  while (starts.size() < 3 * windows) {
    const auto batch = Batch(*loader, 5, 0, 5);
    for (int r = 0; r < 5; ++r) starts.push_back(batch[r * kT] / kT);
  }
  std::vector<std::vector<int32_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int32_t> order(starts.begin() + e * windows, starts.begin() + (e + 1) * windows);
    std::vector<int32_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> all(windows);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all) << "epoch " << e;
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST(LoaderTest, RestoredPositionContinuesIdentically) {
  const std::vector<int32_t> tokens = Iota(500);
  auto straight = DataLoader::Create(tokens, kT, 11);
  auto resumed = DataLoader::Create(tokens, kT, 11);
  ASSERT_TRUE(straight.ok() && resumed.ok());
  for (int step = 0; step < 40; ++step) Batch(*straight, 6, 0, 6);
  const DataLoader::Position saved = straight->position();
  EXPECT_GT(saved.epoch, 0u);
  ASSERT_TRUE(resumed->Restore(saved).ok());
  for (int step = 0; step < 60; ++step) {
    ASSERT_EQ(Batch(*straight, 6, 0, 6), Batch(*resumed, 6, 0, 6)) << step;
  }
  EXPECT_FALSE(resumed->Restore({0, resumed->num_windows()}).ok());
}

TEST(LoaderTest, RowSlicesMatchTheFullBatch) {
  const std::vector<int32_t> tokens = Iota(300);
  auto full = DataLoader::Create(tokens, kT, 2);
  auto rank0 = DataLoader::Create(tokens, kT, 2);
  auto rank1 = DataLoader::Create(tokens, kT, 2);
  ASSERT_TRUE(full.ok() && rank0.ok() && rank1.ok());
  for (int step = 0; step < 30; ++step) {
    std::vector<int32_t> in(6 * kT), tgt(6 * kT), in0(3 * kT), tgt0(3 * kT), in1(3 * kT),
        tgt1(3 * kT);
    full->Next(6, 0, 6, in.data(), tgt.data());
    rank0->Next(6, 0, 3, in0.data(), tgt0.data());
    rank1->Next(6, 3, 3, in1.data(), tgt1.data());
    in0.insert(in0.end(), in1.begin(), in1.end());
    tgt0.insert(tgt0.end(), tgt1.begin(), tgt1.end());
    EXPECT_EQ(in, in0);
    EXPECT_EQ(tgt, tgt0);
    EXPECT_EQ(rank0->position().index, full->position().index);
    EXPECT_EQ(rank1->position().epoch, full->position().epoch);
  }
}

TEST(LoaderTest, ReadSequentialIsStreamOrderAndWraps) {
  const std::vector<int32_t> tokens = Iota(3 * kT + 1);
  auto loader = DataLoader::Create(tokens, kT, 0);
  ASSERT_TRUE(loader.ok());
  std::vector<int32_t> in(4 * kT), tgt(4 * kT);
  loader->ReadSequential(1, 4, in.data(), tgt.data());
  EXPECT_EQ(in[0], 1 * kT);
  EXPECT_EQ(in[kT], 2 * kT);
  EXPECT_EQ(in[2 * kT], 0);
  EXPECT_EQ(tgt[3 * kT], 1 * kT + 1);
  EXPECT_EQ(loader->position().index, 0u);
}

}  // namespace
}  // namespace ladder
