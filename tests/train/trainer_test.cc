// Training-loop properties: bitwise reproducibility, gradient accumulation
// equal to a bigger batch, and learning on a learnable stream.
#include "src/train/trainer.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "tests/train/small_run.h"

namespace ladder {
namespace {

std::vector<double> Losses(const RunConfig& rc, const std::vector<int32_t>& data,
                           TrainerOptions groups = {}, std::vector<float>* weights = nullptr) {
  CpuBackend be;
  auto t = *Trainer::Create(rc, &be, &data, &data, 0, groups);
  std::vector<double> losses;
  for (int i = 0; i < rc.steps; ++i) losses.push_back(t->Step()->loss);
  if (weights != nullptr) {
    weights->resize(t->model().table().total_floats());
    EXPECT_TRUE(t->model().GetWeights(weights->data()).ok());
  }
  return losses;
}

TEST(TrainerTest, SameSeedGivesBitwiseIdenticalLosses) {
  const auto data = RandomTokens(5000, 1);
  RunConfig rc = SmallRun();
  auto a = Losses(rc, data), b = Losses(rc, data);
  EXPECT_EQ(a, b);
  rc.seed = 99;
  EXPECT_NE(Losses(rc, data), a);
}

TEST(TrainerTest, AccumulationEqualsTheBiggerBatch) {
  const auto data = RandomTokens(5000, 2);
  RunConfig big = SmallRun();
  big.batch_size = 8;
  RunConfig accum = SmallRun();
  accum.batch_size = 4;
  accum.total_batch_tokens = 8 * 16;  // two micro-batches per step
  ASSERT_EQ(accum.AccumulationSteps(), 2);
  auto a = Losses(big, data), b = Losses(accum, data);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * a[i]) << "step " << i;
}

// Recomputation redoes the same deterministic ops on the same inputs: the
// run is bit for bit the one that kept its activations, with less memory.
TEST(TrainerTest, RecomputationIsBitwiseIdenticalAndSmaller) {
  const auto data = RandomTokens(5000, 3);
  RunConfig rc = SmallRun();
  rc.total_batch_tokens = 8 * 16;
  std::vector<float> kept, recomputed;
  TrainerOptions groups;
  groups.microbatches = 2;
  groups.schedule = pp::Schedule::kGPipe;  // two slots in flight
  auto a = Losses(rc, data, groups, &kept);
  CpuBackend be;
  auto full = *Trainer::Create(rc, &be, &data, &data, 0, groups);
  int64_t previous = full->model().activation_sizes().total_bytes();
  for (const Recompute level : {Recompute::kGelu, Recompute::kLayer}) {
    groups.recompute = level;
    auto b = Losses(rc, data, groups, &recomputed);
    EXPECT_EQ(a, b) << RecomputeName(level);
    EXPECT_EQ(kept, recomputed) << RecomputeName(level);
    auto lean = *Trainer::Create(rc, &be, &data, &data, 0, groups);
    const int64_t bytes = lean->model().activation_sizes().total_bytes();
    EXPECT_LT(bytes, previous) << RecomputeName(level);  // none > gelu > layer
    previous = bytes;
  }
}

TEST(TrainerTest, LearnsARepeatingPattern) {
  std::vector<int32_t> data(4000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int32_t>("abcdefgh"[i % 8]);
  RunConfig rc = SmallRun();
  rc.steps = 100;
  rc.lr = 1e-2;
  rc.min_lr = 1e-3;
  CpuBackend be;
  auto t = *Trainer::Create(rc, &be, &data, &data, 0);
  const double before = *t->ValidationLoss();
  for (int i = 0; i < rc.steps; ++i) ASSERT_TRUE(t->Step().ok());
  const double after = *t->ValidationLoss();
  EXPECT_GT(before, 5.0);  // ~log(256) at init
  EXPECT_LT(after, 0.5);
}

// Loading ahead changes when a batch is read, not which.
TEST(TrainerTest, PrefetchIsBitwiseIdentical) {
  const auto data = RandomTokens(5000, 4);
  TrainerOptions groups;
  groups.prefetch = true;
  std::vector<float> plain, ahead;
  EXPECT_EQ(Losses(SmallRun(), data, {}, &plain), Losses(SmallRun(), data, groups, &ahead));
  EXPECT_EQ(plain, ahead);
}

// What a resume leaves out on purpose (--resume-forget): the data position
// goes back to the stream's start; a new shuffle seed keeps the position but
// reads other windows, so the next loss differs.
TEST(TrainerTest, ForgettingOnResumeChangesWhatIsRead) {
  const auto data = RandomTokens(5000, 5);
  CpuBackend be;
  for (const Trainer::Forget what : {Trainer::Forget::kData, Trainer::Forget::kRng}) {
    auto kept = *Trainer::Create(SmallRun(), &be, &data, &data, 0);
    auto forgot = *Trainer::Create(SmallRun(), &be, &data, &data, 0);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(kept->Step().ok());
      ASSERT_TRUE(forgot->Step().ok());
    }
    const Trainer::Position at = kept->position();
    ASSERT_TRUE(forgot->ForgetOnResume(what).ok());
    const uint64_t index = forgot->position().loader.index;
    EXPECT_EQ(index, what == Trainer::Forget::kData ? 0 : at.loader.index);
    EXPECT_NE(kept->Step()->loss, forgot->Step()->loss);
  }
  auto same = *Trainer::Create(SmallRun(), &be, &data, &data, 0);
  ASSERT_TRUE(same->ForgetOnResume(Trainer::Forget::kNothing).ok());
  EXPECT_EQ(same->position().loader.index, 0u);
}

TEST(TrainerTest, InvalidConfigIsRefused) {
  const auto data = RandomTokens(5000, 1);
  RunConfig rc = SmallRun();
  rc.total_batch_tokens = 100;  // not a multiple of 4 * 16
  CpuBackend be;
  auto t = Trainer::Create(rc, &be, &data, &data, 0);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  rc = SmallRun();
  rc.model.n_head = 3;  // 32 not divisible by 3
  EXPECT_EQ(Trainer::Create(rc, &be, &data, &data, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ladder
